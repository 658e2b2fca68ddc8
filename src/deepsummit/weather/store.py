"""`weather_daily`: validate a batch with Pandera, upsert the valid rows, quarantine the rest.

A quarantined row is recorded once: the same row (its values as read, without when or by which
request it came) rejected for the same reason again by a rerun is not appended a second time.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import pandera.polars as pa
import polars as pl
from pandera.api.polars.types import PolarsData

from deepsummit.core.errors import disk_space_for
from deepsummit.core.inputs import WEATHER_VARIABLES
from deepsummit.core.warehouse import (
    database_file,
    frame_digest,
    query,
    registered,
    run,
    transaction,
)

# History sources, and a forecast as `forecast@<issue time>` (deepsummit/weather/forecast.py).
SOURCE_PATTERN = r"^(archive|open-meteo|forecast@\d{4}-\d{2}-\d{2}T\d{2}:\d{2}Z)$"
TABLE = "weather_daily"

# Physically possible daily values (units of the Open-Meteo defaults): a value outside is a
# broken response or file, not weather.
VARIABLE_RANGES: dict[str, tuple[float, float]] = {
    "temperature_2m_mean": (-90.0, 60.0),
    "temperature_2m_max": (-90.0, 60.0),
    "temperature_2m_min": (-90.0, 60.0),
    "apparent_temperature_mean": (-110.0, 80.0),
    "apparent_temperature_max": (-110.0, 80.0),
    "apparent_temperature_min": (-110.0, 80.0),
    "precipitation_sum": (0.0, 2_000.0),  # mm
    "rain_sum": (0.0, 2_000.0),  # mm
    "snowfall_sum": (0.0, 1_500.0),  # cm
    "precipitation_hours": (0.0, 24.0),
    "wind_speed_10m_max": (0.0, 500.0),  # km/h
    "wind_gusts_10m_max": (0.0, 600.0),  # km/h
    "wind_direction_10m_dominant": (0.0, 360.0),  # degrees
    "shortwave_radiation_sum": (0.0, 50.0),  # MJ/m²
    "et0_fao_evapotranspiration": (0.0, 40.0),  # mm
}
assert tuple(VARIABLE_RANGES) == WEATHER_VARIABLES, "ranges must follow feature_spec"

# A batch carries these and, for quarantine, where each row came from (`origin`, `row_number`).
# The row as read is what a quarantine record holds (its request id goes to `load_digest`).
RECORD_COLUMNS = ("peakid", "date", "source", *WEATHER_VARIABLES)
STORED_COLUMNS = (*RECORD_COLUMNS, "fetched_at", "request_id")


def _dates_contiguous(data: PolarsData) -> pl.LazyFrame:
    """Per (request_id, peakid): no repeated date and no hole between the first and last."""
    group = ["request_id", "peakid"]
    span = (pl.col("date").max() - pl.col("date").min()).dt.total_days() + 1
    return data.lazyframe.select(
        (
            (pl.col("date").n_unique().over(group) == pl.len().over(group))
            & (span.over(group) == pl.len().over(group))
        ).alias("contiguous")
    )


WEATHER_SCHEMA = pa.DataFrameSchema(
    {
        "peakid": pa.Column(pl.String),
        "date": pa.Column(pl.Date),
        "source": pa.Column(pl.String, pa.Check.str_matches(SOURCE_PATTERN)),
        **{
            name: pa.Column(pl.Float64, pa.Check.in_range(low, high), nullable=True)
            for name, (low, high) in VARIABLE_RANGES.items()
        },
        "fetched_at": pa.Column(pl.Datetime("us")),
        "request_id": pa.Column(pl.String),
        "origin": pa.Column(pl.String),
        "row_number": pa.Column(pl.Int64),
    },
    checks=[pa.Check(_dates_contiguous, error="dates not contiguous per request")],
    strict=True,
    name=TABLE,
)


@dataclass(frozen=True)
class StoreResult:
    stored: int
    quarantined: int


def ensure_tables(con: duckdb.DuckDBPyConnection) -> None:
    run(con, "weather_create_tables")
    run(con, "quarantine_create_table")


def split_valid(batch: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(valid rows, rejected rows with a `reason` column), by WEATHER_SCHEMA."""
    batch = batch.with_columns(pl.col(WEATHER_VARIABLES).fill_nan(None))  # NaN = no value
    try:
        WEATHER_SCHEMA.validate(batch, lazy=True)
    except pa.errors.SchemaErrors as errors:
        failures = errors.failure_cases.filter(pl.col("index").is_not_null())
        reasons = (
            failures.with_columns(
                pl.when(pl.col("schema_context") == "DataFrameSchema")  # a whole-row check
                .then(pl.col("check"))
                .otherwise(pl.format("{}: {} fails {}", "column", "failure_case", "check"))
                .alias("reason")
            )
            .group_by("index")
            .agg(pl.col("reason").unique().sort().str.join("; "))
            .rename({"index": "_index"})
        )
        indexed = batch.with_row_index("_index").with_columns(pl.col("_index").cast(pl.Int32))
        rejected = indexed.join(reasons, on="_index", how="inner").drop("_index")
        valid = indexed.join(reasons, on="_index", how="anti").drop("_index")
        return valid, rejected
    return batch, batch.clear().with_columns(pl.lit(None, pl.String).alias("reason"))


def quarantine(con: duckdb.DuckDBPyConnection, rejected: pl.DataFrame) -> int:
    """Rejected rows (with `reason`, `origin`, `row_number`) into the shared quarantine table,
    each unless it is there already; returns how many rows were rejected."""
    if rejected.is_empty():
        return 0
    rejects = rejected.select(
        pl.col("origin").alias("source"),
        pl.col("row_number").cast(pl.Int32),
        pl.struct(RECORD_COLUMNS).struct.json_encode().alias("record"),
        pl.col("reason"),
        pl.col("request_id").alias("load_digest"),
    )
    with registered(con, weather_rejects=rejects):
        run(con, "weather_quarantine_insert")
    return rejects.height


def store_batch(
    con: duckdb.DuckDBPyConnection, batch: pl.DataFrame, refused: pl.DataFrame | None = None
) -> StoreResult:
    """Validate `batch` (STORED_COLUMNS + origin, row_number); upsert valid rows, quarantine
    the others, and the rows the caller `refused` (the same columns and a `reason`). One
    transaction, so a batch is stored whole or not at all."""
    valid, rejected = split_valid(batch)
    with disk_space_for("a batch of weather rows", database_file(con)), transaction(con):
        if not valid.is_empty():
            with registered(con, weather_batch=valid.select(STORED_COLUMNS)):
                run(con, "weather_upsert")
        quarantined = quarantine(con, rejected)
        if refused is not None:
            quarantined += quarantine(con, refused)
    return StoreResult(stored=valid.height, quarantined=quarantined)


def content_digest(con: duckdb.DuckDBPyConnection, forecasts: bool = False) -> tuple[int, str]:
    """(rows, digest) of weather_daily's history values (or its forecasts'), ignoring when and
    by which request they came."""
    content = query(con, "weather_content", {"forecasts": forecasts})
    return content.height, frame_digest(content)
