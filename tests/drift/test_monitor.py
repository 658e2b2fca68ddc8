"""The reference of a comparison is the training rows of the same season and push weeks: the
strata a profile keeps, chosen around the weeks compared, across the new year for a winter."""

from __future__ import annotations

import datetime as dt

import polars as pl

from deepsummit.drift.monitor import STRATUM, same_season_and_weeks, with_stratum
from deepsummit.drift.profiling import profile


def attempts(season: str, days: list[dt.date]) -> pl.DataFrame:
    return pl.DataFrame({"season": season, "smtdate": days, "x": [float(d.day) for d in days]})


def test_the_reference_is_the_same_season_within_the_weeks_around_those_compared() -> None:
    spring = attempts("Spring", [dt.date(2001, 3, 1) + dt.timedelta(days=d) for d in range(90)])
    autumn = attempts("Autumn", [dt.date(2001, 5, 10)])  # an odd record: its own season
    winter = attempts("Winter", [dt.date(2000, 12, 20) + dt.timedelta(days=d) for d in range(30)])
    train = with_stratum(pl.concat([spring, autumn, winter]))
    reference = profile(train, ["x"], [], description="the training rows", strata=STRATUM)

    may = attempts("Spring", [dt.date(2019, 5, 10), dt.date(2019, 5, 12)])  # week 19
    like = same_season_and_weeks(reference, may, weeks_around=1)
    assert like is not None
    expected = spring.filter(pl.col("smtdate").dt.ordinal_day().is_between(7 * 17 + 1, 7 * 20))
    assert like.numeric["x"].rows == expected.height  # weeks 18–20 of Spring, not Autumn's
    assert like.description == (
        "the training rows of the same season and push weeks (Spring weeks 18–20: within 1 "
        "weeks of those compared) of the training rows"
    )

    # 20 Dec 2000 (a leap year) … 18 Jan 2001: weeks 51–53 and 1–3; week 51 is days 351–357.
    new_year = same_season_and_weeks(reference, attempts("Winter", [dt.date(2019, 1, 2)]), 2)
    assert new_year is not None
    assert "Winter weeks 52–53, 1–3" in new_year.description
    assert new_year.numeric["x"].rows == winter.height - 3  # not 20–22 Dec (days 355–357)

    assert same_season_and_weeks(reference, attempts("Summer", [dt.date(2019, 7, 1)]), 3) is None
