"""Which days of weather the attempts need, which of them are missing, which peaks are skipped."""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import polars as pl

from deepsummit.core.inputs import WINDOW_DAYS
from deepsummit.core.warehouse import query, run
from deepsummit.core.weather_sections import WeatherConfig


@dataclass(frozen=True)
class SkippedPeak:
    peakid: str
    reason: str
    attempt_dates: int


def skipped_peaks(con: duckdb.DuckDBPyConnection) -> tuple[SkippedPeak, ...]:
    """Peaks with attempts that are never fetched: no or suspect coordinates, or unknown."""
    rows = query(con, "weather_skipped_peaks").iter_rows(named=True)
    return tuple(SkippedPeak(**row) for row in rows)


def prepare_needed_days(con: duckdb.DuckDBPyConnection) -> None:
    """Build the temp tables weather_attempt_dates and weather_needed_days for this session."""
    run(con, "weather_needed_days", {"window_days": WINDOW_DAYS})


def missing_spans(
    con: duckdb.DuckDBPyConnection, source: str, config: WeatherConfig
) -> pl.DataFrame:
    """Needed days not stored for `source`, merged into spans per peak, with each peak's
    position: peakid, start_date, end_date, days, latitude, longitude, heightm."""
    return query(con, "weather_needed_spans", {"source": source, "first_date": config.first_date})


def coverage(con: duckdb.DuckDBPyConnection, source: str, config: WeatherConfig) -> pl.DataFrame:
    """Per peak: stored_days, needed_days, stored_needed_days, quarantined_days (needed, not
    stored, quarantined), missing_days (needed, neither stored nor quarantined), and
    before_first_date."""
    return query(con, "weather_coverage", {"source": source, "first_date": config.first_date})
