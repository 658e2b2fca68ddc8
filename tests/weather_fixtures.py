"""Clean records tables for the weather tests, built here so the weather stage is tested on its
own: the contract schemas of docs/architecture.md, filled from the bundle or from a few rows."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pytest

from deepsummit.core.config import Settings, load_settings
from deepsummit.core.inputs import WEATHER_VARIABLES
from deepsummit.core.warehouse import connect

DATA_DIR = load_settings().paths.data_dir  # the data bundle the settings point at

CLEAN_TABLES = """
CREATE TABLE peaks (
    peakid VARCHAR PRIMARY KEY, pkname VARCHAR, heightm INTEGER, himal VARCHAR,
    location VARCHAR, latitude DOUBLE, longitude DOUBLE, coord_source VARCHAR
);
CREATE TABLE expeditions (
    expid VARCHAR, peakid VARCHAR, year INTEGER, season VARCHAR, route1 VARCHAR,
    totmembers INTEGER, smtmembers INTEGER, smtdate DATE, success BOOLEAN, termreason VARCHAR,
    highpoint INTEGER, o2used BOOLEAN, commercial BOOLEAN, camps INTEGER, style VARCHAR,
    source VARCHAR, PRIMARY KEY (expid, year)
);
CREATE TABLE members (
    expedition_id VARCHAR, member_id VARCHAR, peakid VARCHAR, year INTEGER, season VARCHAR,
    sex VARCHAR, age INTEGER, citizenship VARCHAR, expedition_role VARCHAR, hired BOOLEAN,
    success BOOLEAN, solo BOOLEAN, oxygen_used BOOLEAN, died BOOLEAN, injured BOOLEAN,
    highpoint_metres INTEGER, death_height_metres INTEGER, injury_height_metres INTEGER,
    death_cause VARCHAR, injury_type VARCHAR, climber_id VARCHAR, source VARCHAR,
    PRIMARY KEY (member_id, year)
);
"""

BUNDLE_ROWS = """
INSERT INTO peaks
SELECT peakid, pkname, heightm, himal::VARCHAR, location, latitude, longitude,
    coalesce(coord_source, 'empty')
FROM read_csv($peaks, header = true, all_varchar = false);

INSERT INTO expeditions
SELECT expid, peakid, year, season, route1, totmembers, smtmembers, smtdate::DATE, success,
    termreason::VARCHAR, highpoint::DOUBLE::INTEGER, o2used, commercial, camps::DOUBLE::INTEGER,
    style, $expeditions
FROM read_csv($expeditions, header = true);

INSERT INTO members
SELECT expedition_id, member_id, peak_id, year, season, sex, age, citizenship, expedition_role,
    hired, success, solo, oxygen_used, died, injured, highpoint_metres, death_height_metres,
    injury_height_metres, death_cause, injury_type, NULL, $members
FROM read_csv($members, header = true, nullstr = 'NA');
"""


def create_clean_tables(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(CLEAN_TABLES)


def load_bundle_tables(con: duckdb.DuckDBPyConnection, data_dir: Path = DATA_DIR) -> None:
    """The whole bundle's peaks, expeditions and members as clean tables."""
    create_clean_tables(con)
    files = {
        "peaks": data_dir / "himalayan/peaks.csv",
        "expeditions": data_dir / "himalayan/expeditions.csv",
        "members": data_dir / "himalayan/members.csv.gz",
    }
    for statement, (name, path) in zip(_statements(), files.items(), strict=True):
        con.execute(statement, {name: str(path)})


def _statements() -> list[str]:
    """BUNDLE_ROWS split per table (DuckDB binds parameters to one statement at a time)."""
    return [part.strip() for part in BUNDLE_ROWS.split(";") if part.strip()]


def add_attempt(
    con: duckdb.DuckDBPyConnection, expid: str, peakid: str, smtdate: date | None, members: int
) -> None:
    """One expedition on `smtdate` with `members` member rows (0 = an expedition without any)."""
    year = (smtdate or date(2000, 1, 1)).year
    con.execute(
        "INSERT INTO expeditions (expid, peakid, year, season, smtdate, source) "
        "VALUES (?, ?, ?, 'Spring', ?, 'fixture')",
        [expid, peakid, year, smtdate],
    )
    for number in range(1, members + 1):
        con.execute(
            "INSERT INTO members (expedition_id, member_id, peakid, year, source) "
            "VALUES (?, ?, ?, ?, 'fixture')",
            [expid, f"{expid}-{number:02d}", peakid, year],
        )


# A small set of attempts: overlapping windows on EVER, a separate one on EVER a year earlier,
# LHOT on EVER's first date, one EVER attempt reaching before ERA5, peaks that must be skipped,
# and expeditions the weather stage must ignore (no members, no date).
MINI_ATTEMPTS: tuple[tuple[str, str, date | None, int], ...] = (
    ("EVER19101", "EVER", date(2019, 5, 20), 3),
    ("EVER19102", "EVER", date(2019, 5, 23), 2),
    ("EVER18101", "EVER", date(2018, 5, 16), 1),
    ("LHOT19101", "LHOT", date(2019, 5, 20), 2),
    ("EVER40101", "EVER", date(1940, 2, 10), 1),
    ("BAUD19101", "BAUD", date(2019, 10, 1), 2),
    ("PTHN19101", "PTHN", date(2019, 10, 2), 1),
    ("EVER19103", "EVER", date(2019, 9, 1), 0),
    ("LHOT19102", "LHOT", None, 4),
)


def load_mini_tables(
    con: duckdb.DuckDBPyConnection,
    data_dir: Path = DATA_DIR,
    attempts: tuple[tuple[str, str, date | None, int], ...] = MINI_ATTEMPTS,
) -> None:
    """The bundle's peaks (with their coord_source) and the `attempts` records."""
    create_clean_tables(con)
    con.execute(_statements()[0], {"peaks": str(data_dir / "himalayan/peaks.csv")})
    for attempt in attempts:
        add_attempt(con, *attempt)


def weather_settings(tmp_path: Path, **weather: Any) -> Settings:
    """Settings on a tmp warehouse and cache; small backoff so fault tests stay fast."""
    values: dict[str, Any] = {
        "cache_path": str(tmp_path / "cache" / "open-meteo"),
        "backoff_factor": 0.01,
        "backoff_max_s": 0.05,
        "retries": 3,
        "timeout_s": 2.0,
    }
    values.update(weather)
    return load_settings(
        overrides={
            "paths": {
                "warehouse": str(tmp_path / "w.duckdb"),
                "runs_dir": str(tmp_path / "runs"),
                "var_dir": str(tmp_path / "var"),
            },
            "weather": values,
        }
    )


@pytest.fixture
def mini_warehouse(tmp_path: Path) -> Settings:
    """Settings whose warehouse holds the mini clean tables."""
    settings = weather_settings(tmp_path)
    with connect(settings.paths.warehouse) as con:
        load_mini_tables(con)
    return settings


def weather_batch(
    days: int = 5, request_id: str = "r1", start: date = date(2019, 5, 1)
) -> pl.DataFrame:
    """`days` days of EVER as a response batch to store (every value valid)."""
    dates = [start + timedelta(days=i) for i in range(days)]
    return pl.DataFrame(
        {
            "peakid": ["EVER"] * days,
            "date": dates,
            "source": ["open-meteo"] * days,
            **{name: [float(i) for i in range(days)] for name in WEATHER_VARIABLES},
            "fetched_at": [datetime(2025, 1, 1)] * days,
            "request_id": [request_id] * days,
            "origin": ["http://127.0.0.1/v1/archive"] * days,
            "row_number": list(range(1, days + 1)),
        }
    ).with_columns(pl.col("fetched_at").cast(pl.Datetime("us")))
