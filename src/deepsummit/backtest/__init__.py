"""The backtest: how the model would have done, season by season, had it been trained each year.

Rolling origin (`folds.py`): for every test year Y, train on the years before Y − 2, validate on
Y − 2 … Y − 1, test on Y; the transformer (its seeds' ensemble), LightGBM and the logistic
regression see identical rows. `seasons.py` scores each held-out season with intervals from an
expedition bootstrap and averages within seasons, so a model is judged on ranking members of
one season, not on ranking years. `push_days.py` asks the question the product sells: across a
held-out season's days, does the model's P follow the days people actually summited? `run.py`
runs the folds (each one cached, so a rerun on the same snapshot recomputes nothing and a crash
resumes at the next fold) and writes the report.
"""
