"""The backtest: how the served recipe would have done, season by season, had it run each year.

Rolling origin (`folds.py`): for every test year Y, the recipe is trained on every season before
Y and calibrated by the map of its member check, exactly as the registered model is; LightGBM,
CatBoost and the logistic regression see identical rows. `seasons.py` scores each held-out
season with intervals from an expedition bootstrap and averages within seasons, so a model is
judged on ranking members of one season, not on ranking years; deepsummit/train/member_groups.py
asks whether the answer follows the members' groups (age, sex, oxygen, role). `push_days.py`
asks the question the product sells: across a held-out season's days, does the model's P follow
the days people actually summited? `run.py` runs the folds (`cache.py`: each one cached, so a
rerun on the same snapshot recomputes nothing and a crash resumes at the next fold);
`summary.py` and `report.py` turn the outcomes into the report.
"""
