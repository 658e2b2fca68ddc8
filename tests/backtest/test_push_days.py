"""Push-day skill: the correlation of a day's score with its summiters, the climatology
baseline, and the mean over seasons with paired intervals."""

from __future__ import annotations

import datetime as dt

import numpy as np
import polars as pl

from deepsummit.backtest.push_days import (
    climatology,
    daily_scores,
    decision_auc,
    eligible_peak_seasons,
    season_skill,
    summarise,
)

KEY = ("EVER", 2019, "Spring")


def days(n: int) -> pl.Series:
    return pl.Series("smtdate", [dt.date(2019, 5, 10) + dt.timedelta(days=i) for i in range(n)])


def test_a_score_that_follows_the_summiters_has_spearman_one_and_hits() -> None:
    summiters = [0, 2, 9, 30, 5, 0, 0, 1]
    daily = pl.DataFrame(
        {
            "smtdate": days(8),
            "summiters": summiters,
            "pushes": np.array(summiters) + 2,
            "follows": np.array(summiters) + 0.5,
            "opposite": -np.array(summiters, dtype=float),
            "flat": np.ones(8),
        }
    )
    skill = season_skill(daily, ("follows", "opposite", "flat"), KEY)
    assert skill.spearman["follows"] == 1.0
    assert skill.spearman["opposite"] == -1.0
    assert np.isnan(skill.spearman["flat"])  # a model that cannot tell days apart
    assert skill.hit["follows"] and not skill.hit["opposite"]
    assert (skill.days, skill.summit_days, skill.summiters) == (8, 5, 47)
    # Two failed pushes a day: the days with more summiters are the better days to push.
    assert skill.decision["follows"] > 0.5 > skill.decision["opposite"]
    assert skill.decision["flat"] == 0.5  # every push on a day rated alike


def test_climatology_puts_its_weight_on_the_days_earlier_years_summited() -> None:
    features = pl.DataFrame(
        {
            "peakid": ["EVER"] * 4 + ["LHOT"],
            "season": ["Spring"] * 5,
            "year": [2017, 2018, 2018, 2019, 2018],
            "label": [1, 1, 0, 1, 1],
            "smtdate": [
                dt.date(2017, 5, 22),
                dt.date(2018, 5, 21),
                dt.date(2018, 5, 10),  # a turn-back: not a summit day
                dt.date(2019, 5, 10),  # the season itself: not earlier
                dt.date(2018, 5, 10),  # another peak
            ],
        }
    )
    scores = climatology(features, KEY, days(20))  # 10 May … 29 May
    assert int(np.argmax(scores)) in (11, 12)  # 21–22 May
    assert scores[0] < scores.max() / 100  # 10 May: no summit within 10 days


def test_daily_scores_count_summiters_and_average_members() -> None:
    candidates = pl.DataFrame(
        {
            "peakid": "EVER", "year": 2019, "season": "Spring",
            "smtdate": [dt.date(2019, 5, 20)] * 2 + [dt.date(2019, 5, 21)] * 2,
            "model": [0.2, 0.4, 0.6, 0.8],
        }
    )  # fmt: skip
    actual = pl.DataFrame(
        {
            "peakid": "EVER", "year": 2019, "season": "Spring",
            "smtdate": [dt.date(2019, 5, 21)] * 3 + [dt.date(2019, 5, 20)],
            "label": [1, 1, 1, 0],
        }
    )  # fmt: skip
    daily = daily_scores(candidates, actual, ("model",))
    assert np.allclose(daily["model"].to_numpy(), [0.3, 0.7])
    assert daily["summiters"].to_list() == [0, 3]
    assert daily["pushes"].to_list() == [1, 3]


def test_the_decision_auc_asks_whether_pushes_on_higher_rated_days_succeeded_more() -> None:
    summiters, pushes = np.array([0.0, 1, 2]), np.array([2.0, 2, 2])
    # Successes on days 2, 2, 3; failures on days 1, 1, 2: of the 9 pairs, 8 have the success
    # on the higher-rated day and one shares day 2 (half).
    assert np.isclose(decision_auc(np.array([1.0, 2, 3]), summiters, pushes), 8.5 / 9)
    assert np.isclose(decision_auc(np.array([3.0, 2, 1]), summiters, pushes), 0.5 / 9)
    assert np.isnan(decision_auc(np.array([1.0, 2, 3]), summiters, summiters))  # no failure


def test_the_mean_skips_seasons_a_model_cannot_rank_and_pairs_the_differences() -> None:
    summiters = [0, 2, 9, 30, 5, 0]
    seasons = []
    for year, noise in ((2016, 0.0), (2017, 5.0), (2018, 50.0)):
        rng = np.random.default_rng(year)
        daily = pl.DataFrame(
            {
                "smtdate": days(6),
                "summiters": summiters,
                "pushes": np.array(summiters) + 3,
                "model": np.array(summiters) + rng.normal(0, noise + 1e-9, 6),
                "baseline": rng.normal(size=6),
            }
        )
        seasons.append(season_skill(daily, ("model", "baseline"), ("EVER", year, "Spring")))
    flat = pl.DataFrame(
        {"smtdate": days(6), "summiters": summiters, "pushes": np.array(summiters) + 3,
         "model": 1.0, "baseline": np.arange(6.0)}
    )  # fmt: skip
    seasons.append(season_skill(flat, ("model", "baseline"), ("EVER", 2019, "Spring")))
    skill = summarise(seasons, ("model", "baseline"))
    usable = seasons[:3]
    expected = np.mean([s.spearman["model"] for s in usable])
    assert np.isclose(skill.mean_spearman["model"].estimate, expected)
    difference = skill.differences["model − baseline"]
    assert np.isclose(
        difference.estimate,
        expected - np.mean([s.spearman["baseline"] for s in usable]),
    )
    assert difference.low <= difference.estimate <= difference.high
    assert len(skill.seasons) == 4  # the flat season is listed, not averaged
    # The flat model's decision AUC is defined (one half: every day rated alike), so the decision
    # mean counts all four seasons.
    decisions = [s.decision["model"] for s in seasons]
    assert np.isclose(skill.mean_decision["model"].estimate, np.mean(decisions))
    assert np.isclose(
        skill.decision_differences["model − baseline"].estimate,
        np.mean(decisions) - np.mean([s.decision["baseline"] for s in seasons]),
    )


def test_eligible_peak_seasons_need_weather_and_enough_summiters_in_the_held_out_years() -> None:
    features = pl.DataFrame(
        {
            "peakid": ["EVER"] * 3 + ["AMAD"] * 2 + ["PUMO"] * 2,
            "year": [2019, 2019, 2005, 2019, 2019, 2019, 2019],
            "season": "Spring",
            "label": [1, 1, 1, 1, 0, 1, 1],
            "smtdate": [dt.date(2019, 5, d) for d in (20, 23, 21, 12, 14, 10, 11)],
            # PUMO has the summiters but no weather: no day of it can be ranked by the weather
            "has_weather": [True] * 5 + [False] * 2,
        }
    )
    found = eligible_peak_seasons(features, range(2010, 2020), min_summiters=2)
    assert found.rows() == [("EVER", 2019, "Spring", 2, dt.date(2019, 5, 20), dt.date(2019, 5, 23))]
