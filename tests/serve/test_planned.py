"""The planned-attempt layout's calendar: a push day's season and expedition year."""

from __future__ import annotations

import datetime as dt

import pytest

from deepsummit.core.seasons import SEASON_BY_MONTH, expedition_year


@pytest.mark.parametrize(
    ("day", "season", "year"),
    [
        (dt.date(2019, 12, 20), "Winter", 2019),
        (dt.date(2020, 1, 15), "Winter", 2019),  # a January push belongs to the December's year
        (dt.date(2020, 2, 29), "Winter", 2019),
        (dt.date(2020, 3, 1), "Spring", 2020),
        (dt.date(2020, 11, 30), "Autumn", 2020),
    ],
)
def test_a_push_day_falls_in_its_hdb_season_and_expedition_year(day, season, year) -> None:
    assert SEASON_BY_MONTH[day.month] == season
    assert expedition_year(season, day) == year
