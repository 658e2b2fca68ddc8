"""The Himalayan Database's seasons, in time order: their names, their rank, the newest.

Winter of year Y opens in December of Y and runs into Y + 1, so it comes after Autumn of Y: a
season's rank is year × 4 + its position in `SEASONS`. The SQL that ranks seasons
(features_history.sql, features_tabular.sql) spells the same order out; a test holds them to
this one.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl

SEASONS: tuple[str, ...] = ("Spring", "Summer", "Autumn", "Winter")
POSITION: dict[str, int] = {season: position for position, season in enumerate(SEASONS)}
# The month each HDB season opens: a season runs three months from it. Winter opens in December
# and belongs to the December's year.
SEASON_OPENING_MONTH: dict[str, int] = {"Spring": 3, "Summer": 6, "Autumn": 9, "Winter": 12}
SEASON_BY_MONTH: dict[int, str] = {
    (opening + offset - 1) % 12 + 1: season
    for season, opening in SEASON_OPENING_MONTH.items()
    for offset in range(3)
}
# A recorded push date may lie this many months outside its season's three (a Spring expedition
# summiting in early June, a Winter one leaving in November): beyond, the date is an error.
SEASON_SLACK_MONTHS = 1


def expedition_year(season: str, day: dt.date) -> int:
    """The expedition year of a push on `day` in `season` (Winter pushes in Jan/Feb: the year
    before)."""
    return day.year - 1 if season == "Winter" and day.month <= 2 else day.year


def season_rank(year: pl.Expr, season: pl.Expr) -> pl.Expr:
    """year × 4 + the season's position: one number that orders seasons in time."""
    import polars as pl  # here, as below: the settings import this module, not every command Polars

    return year * len(SEASONS) + season.replace_strict(POSITION, return_dtype=pl.Int64)


def season_name(year: pl.Expr, season: pl.Expr) -> pl.Expr:
    """ "2016 Spring": how every report names a season."""
    import polars as pl

    return pl.format("{} {}", year, season)


def newest_season_rows(rows: pl.DataFrame) -> tuple[pl.DataFrame, str]:
    """The rows of the newest season among `rows` (columns year, season), and its name."""
    import polars as pl

    rank = season_rank(pl.col("year"), pl.col("season"))
    newest = rows.filter(rank == rows.select(rank.max()).item())
    return newest, f"{newest['year'][0]} {newest['season'][0]}"


def newest_season(rows: pl.DataFrame) -> str:
    """ "2025 Spring": the newest season among `rows`."""
    return newest_season_rows(rows)[1]
