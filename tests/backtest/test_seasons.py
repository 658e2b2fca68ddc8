"""The season table judges ranking within seasons, and the calibration choice never ships a
map that makes the newest seasons worse."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from deepsummit.backtest.seasons import season_table


def held_out(seasons: dict[str, tuple[int, float]], seed: int = 0) -> pl.DataFrame:
    """Rows of several seasons ("2016 Spring": (rows, summit rate)), ten members per expedition,
    with two scores: `year_mood` knows each season's rate and nothing about members, `member`
    ranks members within every season (and knows nothing of the season)."""
    rng = np.random.default_rng(seed)
    frames = []
    for key, (rows, rate) in seasons.items():
        year, season = key.split()
        skill = rng.normal(size=rows)
        label = (
            rng.random(rows) < 1 / (1 + np.exp(-(skill * 2 + np.log(rate / (1 - rate)))))
        ).astype(float)
        frames.append(
            pl.DataFrame(
                {
                    "expid": [f"{key}-{i // 10}" for i in range(rows)],
                    "year": int(year),
                    "season": season,
                    "label": label,
                    "year_mood": np.full(rows, rate) + rng.normal(0, 1e-3, rows),
                    "member": 1 / (1 + np.exp(-skill)),
                }
            )
        )
    return pl.concat(frames)


SEASONS = {"2016 Spring": (600, 0.3), "2017 Spring": (600, 0.7), "2018 Spring": (600, 0.5)}


def test_a_model_that_ranks_years_wins_pooled_but_not_within_seasons() -> None:
    table = season_table(held_out(SEASONS), ("member", "year_mood"), 100, ())
    assert table.pooled["year_mood"].estimate > 0.6  # it ranks the years
    assert abs(table.within_ordinary["year_mood"].estimate - 0.5) < 0.05  # not the members
    assert table.within_ordinary["member"].estimate > 0.7
    difference = table.differences["member − year_mood"]
    assert difference.low > 0.1
    assert all(season.scored for season in table.seasons)


def test_folds_without_member_rows_give_a_table_without_figures() -> None:
    """A backtest of the expedition-record years only (2020 on) has no member season."""
    table = season_table(held_out(SEASONS).clear(), ("member", "year_mood"), 100, ())
    assert table.seasons == () and table.rows == 0
    assert np.isnan(table.within_ordinary["member"].estimate)
    assert np.isnan(table.differences["member − year_mood"].estimate)


def test_small_one_class_and_disaster_seasons_are_listed_with_their_note() -> None:
    frame = held_out({**SEASONS, "2015 Spring": (300, 0.5)})
    tiny = held_out({"2016 Winter": (20, 0.5)}, seed=1)
    one_class = held_out({"2017 Winter": (150, 0.5)}, seed=2).with_columns(label=pl.lit(0.0))
    table = season_table(
        pl.concat([frame, tiny, one_class]), ("member", "year_mood"), 100, ("2015 Spring",)
    )
    notes = {s.season: s.note for s in table.seasons}
    assert notes["2016 Winter"] == "not scored: 20 rows (fewer than 100)"
    assert notes["2017 Winter"] == "not scored: one outcome only"
    assert notes["2015 Spring"].startswith("disaster season")
    assert notes["2016 Spring"] == ""
    scored = [s for s in table.seasons if s.scored]
    assert len(scored) == 4  # the disaster season is scored and shown
    # ... and counts in the mean over every scored season, not in the ordinary one.
    ordinary = season_table(frame.filter(pl.col("year") != 2015), ("member",), 100, ())
    assert table.within_ordinary["member"].estimate == pytest.approx(
        ordinary.within_ordinary["member"].estimate
    )
    assert table.within["member"].estimate != pytest.approx(
        table.within_ordinary["member"].estimate
    )
