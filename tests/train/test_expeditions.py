"""Seasons of expedition records judged by expedition: success AUC, the summit fraction's Brier
score, and the gap between mean P and the summit fraction; listed seasons stay unscored."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from sklearn.metrics import roc_auc_score

from deepsummit.train.expeditions import by_expedition, expedition_table


def expedition_rows(seed: int = 0) -> pl.DataFrame:
    """Member rows of expedition records: two scored seasons of 40 expeditions, and 2020
    Spring with 5; model "good" knows each team's chances, "flat" says 0.5 to everyone."""
    rng = np.random.default_rng(seed)
    rows = []
    for year, season, teams in ((2023, "Spring", 40), (2023, "Autumn", 40), (2020, "Spring", 5)):
        for team in range(teams):
            chance = rng.uniform(0.05, 0.95)
            size = int(rng.integers(2, 8))
            summiters = int(rng.binomial(size, chance))
            for member in range(size):
                rows.append(
                    {
                        "expid": f"{season[0]}{year}-{team}",
                        "year": year,
                        "season": season,
                        "label": member < summiters,
                        "good": chance,
                        "flat": 0.5,
                    }
                )
    return pl.DataFrame(rows)


def test_each_season_is_judged_by_its_expeditions() -> None:
    rows = expedition_rows()
    table = expedition_table(rows, ("good", "flat"), 30, {"2020 Spring": "the pandemic"})
    seasons = {s.season: s for s in table.seasons}
    assert seasons["2020 Spring"].note == "not scored: the pandemic"
    assert not seasons["2020 Spring"].scored
    assert table.scored_seasons == 2

    teams = by_expedition(rows, ("good", "flat"))
    spring = teams.filter((pl.col("year") == 2023) & (pl.col("season") == "Spring"))
    expected_auc = roc_auc_score(spring["success"], spring["good"])
    assert seasons["2023 Spring"].auc["good"].estimate == pytest.approx(expected_auc)
    assert seasons["2023 Spring"].auc["flat"].estimate == 0.5
    fraction = spring["summiters"] / spring["members"]
    expected_brier = float(((spring["good"] - fraction) ** 2).mean())
    assert seasons["2023 Spring"].brier["good"].estimate == pytest.approx(expected_brier)
    # The gap: member-weighted mean P against the members' summit fraction.
    members = rows.filter((pl.col("year") == 2023) & (pl.col("season") == "Spring"))
    gap = abs(members["good"].mean() - members["label"].mean())
    assert [s.season for s in table.seasons] == ["2020 Spring", "2023 Spring", "2023 Autumn"]
    season_gaps = [abs(s.mean_probability["good"] - s.summit_fraction) for s in table.seasons[1:]]
    assert season_gaps[0] == pytest.approx(gap)
    assert table.gap["good"].estimate == pytest.approx(np.mean(season_gaps))

    difference = table.differences["good − flat"]
    assert difference.low > 0  # knowing the teams' chances ranks them, beyond noise
    low, high = table.within["good"].low, table.within["good"].high
    assert low <= table.within["good"].estimate <= high


def test_a_season_with_too_few_expeditions_is_listed_not_scored() -> None:
    table = expedition_table(expedition_rows(), ("good",), 50, {})
    assert [s.note for s in table.seasons] == [
        "not scored: 5 expeditions (fewer than 50)",
        "not scored: 40 expeditions (fewer than 50)",
        "not scored: 40 expeditions (fewer than 50)",
    ]
    assert np.isnan(table.within["good"].estimate)  # no season: no figure, never a silent 0
