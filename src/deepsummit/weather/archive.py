"""The bundled ERA5-derived archive (weather/era5_daily.parquet) as the offline weather source.

The whole file is loaded for every peak that the warehouse knows and may fetch (245k rows, a
few seconds): simpler than cutting it to the attempt windows, and the features stage reads
only the days it needs. A row of any other peak goes to quarantine with why, as a value out of
range does (once, however often the file is loaded again). Coverage of the needed days is
reported by the caller. The file's values are pre-dawn single samples (see the data README);
they are stored as they are, NULL stays NULL, under source `archive` so they never mix with
Open-Meteo's true daily values.
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


# Why a row of a peak without weather here is quarantined: a peak the records do not know (in
# the records stage's words for an expedition or member of one), or one without coordinates.
UNKNOWN_PEAK = "unknown peak id (not in peaks)"
NOT_FETCHABLE = "peak without usable coordinates (none, or flagged geocoded-suspect)"


@dataclass(frozen=True)
class ArchiveOutcome:
    rows_read: int  # = stored + quarantined
    stored: int
    quarantined: int  # out of range, or of a peak weather is not stored for


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


def load_archive(
    con: duckdb.DuckDBPyConnection, path: Path, peaks: dict[str, bool]
) -> ArchiveOutcome:
    """Store the archive file's rows in weather_daily (validated, upserted) for the peaks that
    `peaks` (each peak the records know -> whether weather may be stored for it) allows; the
    rows of any other peak go to quarantine with why, so that every row read is accounted for."""
    frame, digest = read_archive(path)
    frame = _with_request_ids(frame.sort("peakid", "date"), digest)
    fetchable = [peakid for peakid, allowed in peaks.items() if allowed]
    reason = (
        pl.when(pl.col("peakid").is_in(fetchable))
        .then(pl.lit(None, pl.String))
        .when(pl.col("peakid").is_in(list(peaks)))
        .then(pl.lit(NOT_FETCHABLE))
        .otherwise(pl.lit(UNKNOWN_PEAK))
    )
    batch = frame.select(
        pl.col("peakid").cast(pl.String),
        pl.col("date"),
        pl.lit(SOURCE).alias("source"),
        *(pl.col(name).cast(pl.Float64) for name in WEATHER_VARIABLES),
        pl.lit(datetime.now(UTC).replace(tzinfo=None)).cast(pl.Datetime("us")).alias("fetched_at"),
        pl.col("request_id"),
        pl.lit(str(path)).alias("origin"),
        pl.col("row_number").cast(pl.Int64),
        reason.alias("reason"),
    )
    loadable = pl.col("reason").is_null()
    result: StoreResult = store_batch(
        con, batch.filter(loadable).drop("reason"), refused=batch.filter(~loadable)
    )
    return ArchiveOutcome(
        rows_read=frame.height, stored=result.stored, quarantined=result.quarantined
    )
