"""Attempts: member rows with an expedition date, on any peak of the records.

A peak with weather from the source needs a complete window; a peak without any keeps its
attempts with the weather absent (`has_weather` false). Every member row either becomes an
attempt or is counted under the first reason that keeps it out (`attempt_candidates.reason`,
totals in `attempt_exclusions`), so attempts + excluded = member rows.
"""

from __future__ import annotations

import duckdb
import polars as pl

from deepsummit.core.config import FeaturesConfig
from deepsummit.core.warehouse import query, registered, run
from deepsummit.features.windows import compute_windows

# Exclusion reasons, in the order they are tested (the first that applies is recorded).
EXCLUSION_REASONS: tuple[str, ...] = (
    "no expedition match",
    "no date",
    "unknown peak",
    "no label",
    "window incomplete",
    "after the test years",
)


def build_attempts(
    con: duckdb.DuckDBPyConnection, config: FeaturesConfig, source: str
) -> pl.DataFrame:
    """Build `attempt_candidates`, `weather_windows`, `attempts` and `attempt_exclusions` from
    the clean tables and the weather of `source`; return the windows (one per (peakid, date)
    any candidate needs)."""
    run(con, "features_attempt_candidates")
    targets = query(con, "features_window_targets")
    windows = compute_windows(con, targets, source)
    with registered(con, windows_frame=windows):
        run(con, "features_weather_windows_table", {"source": source})
    run(
        con,
        "features_attempt_status",
        {
            "source": source,
            "max_missing_days": config.max_missing_days,
            "test_until": config.split.test_until,
        },
    )
    run(con, "features_attempts")
    return windows


def exclusion_counts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Member rows kept out of the attempts, per reason (reasons in test order)."""
    counts = dict(con.table("attempt_exclusions").fetchall())
    order = {reason: position for position, reason in enumerate(EXCLUSION_REASONS)}
    return {reason: counts[reason] for reason in sorted(counts, key=lambda r: order.get(r, 99))}
