"""Weather windows: the SQL result equals a window computed by hand from the daily rows."""

from __future__ import annotations

import datetime as dt
import math
import random
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pytest
from features_tables import create_contract_tables, insert

from deepsummit.contracts.preprocessing import window_tensors
from deepsummit.core.inputs import (
    DIRECTION_VARIABLE,
    WEATHER_CHANNELS,
    WEATHER_TOKENS,
    WEATHER_VARIABLES,
    WINDOW_DAYS,
)
from deepsummit.core.warehouse import frame_digest
from deepsummit.features.windows import compute_windows, window_days

pytest_plugins = ["features_fixtures"]

DATE = dt.date(2001, 1, 20)  # the window crosses a year boundary: day_of_year wraps
ABSENT_DAY = 40  # days before DATE without a weather row
SNOWLESS_TOKEN_DAYS = (3, 4, 5)  # snowfall NULL on every day of the three-day token D-5..D-3


def _daily_rows(source: str, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for before in range(WINDOW_DAYS + 5):
        if before == ABSENT_DAY:
            continue
        row = {"peakid": "TEST", "date": DATE - dt.timedelta(days=before), "source": source}
        for name in WEATHER_VARIABLES:
            row[name] = rng.uniform(-20, 40)
        # Directions around north: the arithmetic mean (~180) is wrong, the circular ~0/360.
        row["wind_direction_10m_dominant"] = rng.choice([rng.uniform(340, 360), rng.uniform(0, 20)])
        row["precipitation_hours"] = None  # NULL on every day
        if before in SNOWLESS_TOKEN_DAYS:
            row["snowfall_sum"] = None
        if before % 7 == 0:
            row["rain_sum"] = None  # NULL on some days only
        rows.append(row)
    return rows


@pytest.fixture
def weather_con(tmp_path: Path) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    create_contract_tables(con)
    insert(con, "weather_daily", _daily_rows("archive", seed=1))
    insert(con, "weather_daily", _daily_rows("open-meteo", seed=2))  # must never leak in
    yield con
    con.close()


def _by_hand(rows: list[dict], date: dt.date) -> tuple[np.ndarray, list[float], list[int]]:
    """The 26×16 window of `date` from plain Python over the daily rows."""
    by_day = {(date - row["date"]).days: row for row in rows}
    spans = [(1, 7), (3, 10), (10, 9)]  # (days per token, tokens): the spec's scales
    values, days_before, day_of_year = [], [], []
    for width, tokens in spans:
        for bucket in range(tokens):  # oldest first
            newest = (tokens - 1 - bucket) * width
            days = list(range(newest, newest + width))
            days_before.append(sum(days) / width)
            day_of_year.append(
                (date - dt.timedelta(days=newest + (width - 1) // 2)).timetuple().tm_yday
            )
            token = {}
            for name in WEATHER_VARIABLES:
                present = [
                    by_day[d][name] for d in days if d in by_day and by_day[d][name] is not None
                ]
                if name == DIRECTION_VARIABLE:  # the mean direction vector's two components
                    for channel, f in (("sin", math.sin), ("cos", math.cos)):
                        mean = sum(f(math.radians(v)) for v in present) / len(present)
                        token[f"wind_direction_{channel}"] = mean if present else math.nan
                else:
                    token[name] = sum(present) / len(present) if present else math.nan
            values.append([token[channel] for channel in WEATHER_CHANNELS])
    return np.array(values), days_before, day_of_year


def test_window_days_follow_the_spec_layout() -> None:
    days = window_days()
    tokens = days.group_by("token", maintain_order=True).agg(
        pl.col("scale").first(), pl.col("days_before").mean().alias("mean"), pl.len()
    )
    assert tokens.height == WEATHER_TOKENS == 26
    assert tokens["scale"].value_counts(sort=True)["count"].to_list() == [10, 9, 7]
    assert tokens["len"].to_list() == [1] * 7 + [3] * 10 + [10] * 9
    # oldest → newest within each scale, each scale ending on the attempt date
    assert tokens["mean"].to_list()[:7] == [6, 5, 4, 3, 2, 1, 0]
    assert tokens["mean"][7] == 28 and tokens["mean"][16] == 1
    assert tokens["mean"][17] == 84.5 and tokens["mean"][25] == 4.5
    assert days.filter(pl.col("scale") == "ten_day")["days_before"].sort().to_list() == list(
        range(90)
    )


def test_sql_window_equals_the_window_computed_by_hand(weather_con) -> None:
    windows = compute_windows(
        weather_con, pl.DataFrame({"peakid": ["TEST"], "date": [DATE]}), "archive"
    )
    assert windows.height == WEATHER_TOKENS
    _, values, days_before, day_of_year = window_tensors(windows)

    expected, expected_before, expected_doy = _by_hand(_daily_rows("archive", seed=1), DATE)
    assert values.shape == (1, 26, 16)
    np.testing.assert_allclose(values[0], expected, rtol=1e-9, atol=1e-9, equal_nan=True)
    np.testing.assert_allclose(days_before[0], expected_before)
    assert day_of_year[0].tolist() == expected_doy
    assert windows["missing_days"].unique().to_list() == [1]  # the one absent day

    # Directions around north: 359° and 1° are neighbours, so every token points north.
    north = values[0, :, WEATHER_CHANNELS.index("wind_direction_cos")]
    assert (north > 0.8).all()
    assert np.isnan(values[0, :, WEATHER_CHANNELS.index("precipitation_hours")]).all()
    snow = values[0, :, WEATHER_CHANNELS.index("snowfall_sum")]
    assert np.isnan(snow[15])  # the three-day token D-5..D-3: NULL on all its days
    assert not np.isnan(snow[4])  # the daily token D-2 has snow


def test_missing_days_count_absent_rows(weather_con) -> None:
    later = DATE + dt.timedelta(days=3)  # three days past the last weather row
    targets = pl.DataFrame({"peakid": ["TEST", "TEST", "NOPE"], "date": [DATE, later, DATE]})
    windows = compute_windows(weather_con, targets, "archive")
    missing = dict(
        windows.group_by("peakid", "date")
        .agg(pl.col("missing_days").max())
        .select(pl.concat_str("peakid", pl.col("date").cast(pl.String)), "missing_days")
        .iter_rows()
    )
    assert missing == {
        f"TEST{DATE}": 1,  # the absent day
        f"TEST{later}": 4,  # 3 future days + the absent one
        f"NOPE{DATE}": WINDOW_DAYS,  # a peak without weather
    }
    nowhere = windows.filter(pl.col("peakid") == "NOPE")
    assert set(nowhere.select(WEATHER_CHANNELS).null_count().row(0)) == {WEATHER_TOKENS}


def test_windows_computed_again_are_the_same_to_the_last_bit(bundle_warehouse: Path) -> None:
    """A rebuild on unchanged weather must not change the snapshot's digest (and so retrain):
    every mean sums its days exactly, whatever order the parallel join yields them in."""
    with duckdb.connect(str(bundle_warehouse), read_only=True) as con:
        targets = con.sql(
            "SELECT DISTINCT peakid, date FROM weather_daily "
            "WHERE source = 'archive' AND date >= DATE '2005-01-01'"
        ).pl()
        digests = {frame_digest(compute_windows(con, targets, "archive")) for _ in range(3)}
    assert targets.height > 10_000
    assert len(digests) == 1
