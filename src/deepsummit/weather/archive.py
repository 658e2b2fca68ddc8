"""The bundled ERA5-derived archive (weather/era5_daily.parquet) as the offline weather source.

The whole file is loaded for every peak that the warehouse knows and may fetch (245k rows, a
few seconds): simpler than cutting it to the attempt windows, and the features stage reads
only the days it needs. Coverage of the needed days is reported by the caller. The file's
values are pre-dawn single samples (see the data README); they are stored as they are, NULL
stays NULL, under source `archive` so they never mix with Open-Meteo's true daily values.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import polars as pl

from deepsummit.core.errors import SourceUnreadable
from deepsummit.core.inputs import WEATHER_VARIABLES
from deepsummit.weather.store import StoreResult, store_batch

SOURCE = "archive"


@dataclass(frozen=True)
class ArchiveOutcome:
    rows_read: int
    stored: int
    quarantined: int
    not_loaded: dict[str, int]  # peaks of the file that are not fetchable here -> rows left out


def read_archive(path: Path) -> tuple[pl.DataFrame, str]:
    """(the file with a 1-based `row_number`, sha256 of its bytes); one clear line if unreadable."""
    if not path.exists():
        raise SourceUnreadable(str(path), "no such file")
    data = path.read_bytes()
    try:
        frame = pl.read_parquet(data)
    except Exception as error:  # polars raises several types for a broken file
        raise SourceUnreadable(str(path), f"not a readable parquet file ({error})") from error
    missing = [c for c in ("peakid", "date", *WEATHER_VARIABLES) if c not in frame.columns]
    if missing:
        raise SourceUnreadable(str(path), f"missing columns {', '.join(missing)}")
    return frame.with_row_index("row_number", offset=1), hashlib.sha256(data).hexdigest()


def _with_request_ids(frame: pl.DataFrame, digest: str) -> pl.DataFrame:
    """request_id per contiguous run of one peak's dates (the file has gaps: EVER 1945-49)."""
    step = pl.col("date").diff().over("peakid").dt.total_days().fill_null(1)
    return (
        frame.with_columns(step.ne(1).cum_sum().over("peakid").alias("_segment"))
        .with_columns(
            pl.format(
                "archive-{}-{}-{}",
                pl.lit(digest[:12]),
                pl.col("peakid"),
                pl.col("date").first().over("peakid", "_segment"),
            ).alias("request_id")
        )
        .drop("_segment")
    )


def load_archive(con: duckdb.DuckDBPyConnection, path: Path, peakids: set[str]) -> ArchiveOutcome:
    """Store the archive file's rows of `peakids` in weather_daily (validated, upserted)."""
    frame, digest = read_archive(path)
    frame = frame.sort("peakid", "date")
    loaded = _with_request_ids(frame.filter(pl.col("peakid").is_in(sorted(peakids))), digest)
    not_loaded = dict(
        frame.filter(~pl.col("peakid").is_in(sorted(peakids))).group_by("peakid").len().iter_rows()
    )
    batch = loaded.select(
        pl.col("peakid").cast(pl.String),
        pl.col("date"),
        pl.lit(SOURCE).alias("source"),
        *(pl.col(name).cast(pl.Float64) for name in WEATHER_VARIABLES),
        pl.lit(datetime.now(UTC).replace(tzinfo=None)).cast(pl.Datetime("us")).alias("fetched_at"),
        pl.col("request_id"),
        pl.lit(str(path)).alias("origin"),
        pl.col("row_number").cast(pl.Int64),
    )
    result: StoreResult = store_batch(con, batch)
    return ArchiveOutcome(
        rows_read=frame.height,
        stored=result.stored,
        quarantined=result.quarantined,
        not_loaded=not_loaded,
    )
