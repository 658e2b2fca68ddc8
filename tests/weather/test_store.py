"""weather_daily: Pandera validation, upsert without duplicates, quarantine with reasons."""

from __future__ import annotations

import json
from datetime import date, datetime

import duckdb
import polars as pl
import pytest
from weather_fixtures import weather_batch

from deepsummit.core.inputs import WEATHER_VARIABLES
from deepsummit.weather import store


@pytest.fixture
def con() -> duckdb.DuckDBPyConnection:
    connection = duckdb.connect()
    store.ensure_tables(connection)
    return connection


def test_table_columns_follow_the_feature_spec(con: duckdb.DuckDBPyConnection) -> None:
    columns = [row[0] for row in con.execute("DESCRIBE weather_daily").fetchall()]
    assert columns == ["peakid", "date", "source", *WEATHER_VARIABLES, "fetched_at", "request_id"]


def test_upsert_twice_never_duplicates(con: duckdb.DuckDBPyConnection) -> None:
    assert store.store_batch(con, weather_batch()).stored == 5
    changed = weather_batch().with_columns(pl.lit(-1.0).alias("temperature_2m_mean"))
    store.store_batch(con, changed)
    rows = con.execute("SELECT count(*), min(temperature_2m_mean) FROM weather_daily").fetchone()
    assert rows == (5, -1.0)


def test_nan_is_stored_as_null(con: duckdb.DuckDBPyConnection) -> None:
    frame = weather_batch().with_columns(pl.lit(float("nan")).alias("precipitation_hours"))
    store.store_batch(con, frame)
    assert con.execute("SELECT count(precipitation_hours) FROM weather_daily").fetchone() == (0,)


def test_out_of_range_rows_go_to_quarantine_with_reason(con: duckdb.DuckDBPyConnection) -> None:
    frame = weather_batch().with_columns(
        pl.when(pl.col("row_number") == 3)
        .then(999.0)
        .otherwise(pl.col("temperature_2m_max"))
        .alias("temperature_2m_max")
    )
    result = store.store_batch(con, frame)
    assert (result.stored, result.quarantined) == (4, 1)
    source, table, row, record, reason = con.execute(
        "SELECT source, table_name, row_number, record, reason FROM quarantine"
    ).fetchone()
    assert (source, table, row) == ("http://127.0.0.1/v1/archive", "weather_daily", 3)
    assert "temperature_2m_max" in reason and "999" in reason
    assert json.loads(record)["date"] == "2019-05-03"


def test_dates_with_a_hole_in_one_request_are_rejected(con: duckdb.DuckDBPyConnection) -> None:
    holed = weather_batch().filter(pl.col("row_number") != 3)
    other = weather_batch(request_id="r2", start=date(2019, 6, 1))
    result = store.store_batch(con, pl.concat([holed, other]))
    assert (result.stored, result.quarantined) == (5, 4)  # r2 is fine, every row of r1 is not
    reasons = {r for (r,) in con.execute("SELECT DISTINCT reason FROM quarantine").fetchall()}
    assert reasons == {"dates not contiguous per request"}


def test_the_same_rejected_row_is_quarantined_once(con: duckdb.DuckDBPyConnection) -> None:
    def with_bad_max(value: float, request_id: str, fetched_at: datetime) -> pl.DataFrame:
        return weather_batch(request_id=request_id).with_columns(
            pl.when(pl.col("row_number") == 3)
            .then(value)
            .otherwise(pl.col("temperature_2m_max"))
            .alias("temperature_2m_max"),
            pl.lit(fetched_at).cast(pl.Datetime("us")).alias("fetched_at"),
        )

    store.store_batch(con, with_bad_max(999.0, "r1", datetime(2025, 1, 1)))
    # Asked again later, by another request: the same row as read, rejected for the same reason.
    again = store.store_batch(con, with_bad_max(999.0, "r2", datetime(2025, 1, 2)))
    assert (again.stored, again.quarantined) == (4, 1)
    assert con.execute("SELECT count(*) FROM quarantine").fetchone() == (1,)
    # Another bad value for that day is another row.
    store.store_batch(con, with_bad_max(-999.0, "r3", datetime(2025, 1, 3)))
    assert con.execute("SELECT count(*) FROM quarantine").fetchone() == (2,)
