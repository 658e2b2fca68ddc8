"""The clean tables of docs/architecture.md, built here for the features tests and bench.

The records and weather stages build these tables in production; the features tests must not
depend on those modules, so this file creates the contract schema itself and fills it either
from the data bundle (read by DuckDB directly) or from small hand-made frames.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb
import polars as pl

from deepsummit.core.config import Settings, load_settings
from deepsummit.core.inputs import WEATHER_VARIABLES

BUNDLE = load_settings().paths.data_dir  # the data bundle the settings point at

CONTRACT_DDL = f"""
CREATE TABLE peaks (
    peakid VARCHAR, pkname VARCHAR, heightm INTEGER, himal VARCHAR, location VARCHAR,
    latitude DOUBLE, longitude DOUBLE, coord_source VARCHAR
);
CREATE TABLE expeditions (
    expid VARCHAR, peakid VARCHAR, year INTEGER, season VARCHAR, route1 VARCHAR,
    totmembers INTEGER, smtmembers INTEGER, smtdate DATE, success BOOLEAN, termreason VARCHAR,
    highpoint INTEGER, o2used BOOLEAN, commercial BOOLEAN, camps INTEGER, style VARCHAR,
    source VARCHAR
);
CREATE TABLE members (
    expedition_id VARCHAR, member_id VARCHAR, peakid VARCHAR, year INTEGER, season VARCHAR,
    sex VARCHAR, age INTEGER, citizenship VARCHAR, expedition_role VARCHAR, hired BOOLEAN,
    success BOOLEAN, solo BOOLEAN, oxygen_used BOOLEAN, died BOOLEAN, injured BOOLEAN,
    highpoint_metres INTEGER, death_height_metres INTEGER, injury_height_metres INTEGER,
    death_cause VARCHAR, injury_type VARCHAR, climber_id VARCHAR, source VARCHAR
);
CREATE TABLE expedition_details (
    expid VARCHAR, year INTEGER, peakid VARCHAR, season VARCHAR, basecamp_date DATE,
    highpoint_date DATE, termination_date DATE, termination_reason VARCHAR,
    highpoint_metres INTEGER, members INTEGER, member_deaths INTEGER, hired_staff INTEGER,
    hired_staff_deaths INTEGER, oxygen_used BOOLEAN, trekking_agency VARCHAR, source VARCHAR
);
CREATE TABLE weather_daily (
    peakid VARCHAR, date DATE, source VARCHAR,
    {", ".join(f"{name} DOUBLE" for name in WEATHER_VARIABLES)},
    fetched_at TIMESTAMP, request_id VARCHAR
);
"""

# The bundle's files into the contract columns, as the ingest stage would leave them (rows the
# ingest would quarantine, here the one expedition without a season, are left out).
BUNDLE_LOAD = """
INSERT INTO peaks BY NAME
SELECT peakid, pkname, heightm, himal::VARCHAR AS himal, location, latitude, longitude,
       coord_source
FROM read_csv('{data}/himalayan/peaks.csv');
INSERT INTO expeditions BY NAME
SELECT expid, peakid, year, season, route1, totmembers, smtmembers, smtdate, success,
       termreason::VARCHAR AS termreason, highpoint::INTEGER AS highpoint, o2used, commercial,
       camps::INTEGER AS camps, style, 'expeditions.csv' AS source
FROM read_csv('{data}/himalayan/expeditions.csv')
-- As the records stage leaves them: a push date outside its season (with a month's slack, see
-- deepsummit/core/planned.py) is quarantined there.
WHERE season IS NOT NULL AND (smtdate IS NULL OR smtdate - make_date(year, CASE season
    WHEN 'Spring' THEN 3 WHEN 'Summer' THEN 6 WHEN 'Autumn' THEN 9 ELSE 12 END, 1)
    BETWEEN -31 AND 121);
INSERT INTO members BY NAME
SELECT * EXCLUDE (peak_id, peak_name), peak_id AS peakid, NULL AS climber_id,
       'members.csv.gz' AS source
FROM read_csv('{data}/himalayan/members.csv.gz', nullstr = 'NA');
INSERT INTO expedition_details BY NAME
SELECT * EXCLUDE (expedition_id, peak_id, peak_name), expedition_id AS expid,
       peak_id AS peakid, 'expeditions_tidytuesday.csv.gz' AS source
FROM read_csv('{data}/himalayan/expeditions_tidytuesday.csv.gz', nullstr = 'NA');
INSERT INTO weather_daily BY NAME
SELECT *, 'archive' AS source, TIMESTAMP '2025-01-01' AS fetched_at, 'era5' AS request_id
FROM read_parquet('{data}/weather/era5_daily.parquet');
"""


def create_contract_tables(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(CONTRACT_DDL)


def load_bundle(con: duckdb.DuckDBPyConnection, data_dir: Path = BUNDLE) -> None:
    create_contract_tables(con)
    con.execute(BUNDLE_LOAD.format(data=data_dir))


def insert(con: duckdb.DuckDBPyConnection, table: str, rows: list[dict]) -> None:
    """Hand-made rows into a contract table (columns left out are NULL)."""
    con.register("rows_frame", pl.DataFrame(rows, infer_schema_length=None))
    con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM rows_frame")
    con.unregister("rows_frame")


def settings_for(tmp_path: Path, warehouse: Path, **features: object) -> Settings:
    return load_settings(
        overrides={
            "paths": {"warehouse": str(warehouse), "runs_dir": str(tmp_path / "runs")},
            "features": {"features_dir": str(tmp_path / "features"), **features},
        }
    )


def expedition(expid: str, year: int, **values: object) -> dict:
    """An expedition row with plausible defaults (override any contract column)."""
    return {
        "expid": expid, "peakid": "PEAK", "year": year, "season": "Spring",
        "route1": "S Col-SE Ridge", "totmembers": 4, "smtmembers": 1,
        "smtdate": dt.date(year, 5, 15), "success": True, "termreason": "1", "highpoint": 8000,
        "o2used": True, "commercial": False, "camps": 4, "style": None, "source": "test",
    } | values  # fmt: skip


def member(expid: str, number: int, year: int, **values: object) -> dict:
    """A member row of expedition `expid` with plausible defaults."""
    return {
        "expedition_id": expid, "member_id": f"{expid}-{number:02d}", "peakid": "PEAK",
        "year": year, "season": "Spring", "sex": "M", "age": 35, "citizenship": "France",
        "expedition_role": "Climber", "hired": False, "success": True, "solo": False,
        "oxygen_used": True, "died": False, "injured": False, "highpoint_metres": 8000,
        "source": "test",
    } | values  # fmt: skip


def peak(peakid: str, **values: object) -> dict:
    return {"peakid": peakid, "pkname": peakid.title(), "heightm": 8000, "himal": "12"} | values


def weather_days(peakid: str, first: dt.date, last: dt.date, source: str = "archive") -> list[dict]:
    """Daily weather rows for every day of [first, last], values derived from the date."""
    rows = []
    day = first
    while day <= last:
        value = float(day.toordinal() % 17)
        rows.append(
            {"peakid": peakid, "date": day, "source": source}
            | {name: value for name in WEATHER_VARIABLES}
        )
        day += dt.timedelta(days=1)
    return rows
