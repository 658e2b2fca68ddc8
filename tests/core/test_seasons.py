"""The seasons' order: one declaration, which the SQL that ranks seasons spells out the same."""

from __future__ import annotations

import re
from importlib.resources import files

import polars as pl
import pytest

from deepsummit.core.seasons import SEASONS, newest_season, newest_season_rows


def test_the_newest_season_is_winter_after_autumn_of_the_same_year() -> None:
    frame = pl.DataFrame(
        {
            "year": [2019, 2019, 2018, 2019, 2019],
            "season": ["Autumn", "Winter", "Winter", "Spring", "Winter"],
        }
    )
    rows, name = newest_season_rows(frame)
    assert name == "2019 Winter" and rows.height == 2
    assert newest_season(frame.filter(pl.col("season") != "Winter")) == "2019 Autumn"


@pytest.mark.parametrize("statement", ["features_history", "features_tabular"])
def test_the_sql_ranks_the_seasons_in_their_declared_order(statement: str) -> None:
    text = (files("deepsummit") / "sql" / f"{statement}.sql").read_text()
    case = re.search(r"CASE \w+\.season(.*?)END AS season_rank", text, re.DOTALL)
    assert case, f"{statement}.sql ranks no season"
    ranks = re.findall(r"WHEN '(\w+)' THEN (\d)", case.group(1))
    assert {season: int(rank) for season, rank in ranks} == {
        season: position for position, season in enumerate(SEASONS)
    }
