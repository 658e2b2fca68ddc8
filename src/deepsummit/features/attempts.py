"""Attempts: every record with an outcome and an expedition date, on any peak of the records.

A record is a row of the members file, or a climbing member an expedition without member rows
counts (sql/features_attempt_candidates.sql). A window with weather from the source needs to be
complete; one without any day from the source keeps its attempts with the weather absent
(`has_weather` false). Every candidate either becomes an attempt or is counted under the first
reason that keeps it out (`attempt_candidates.reason`, totals in `attempt_exclusions`), so
attempts + excluded = member rows + the members expedition records count.
"""

from __future__ import annotations

import duckdb
import polars as pl

from deepsummit.core.errors import PipelineError
from deepsummit.core.inputs import WINDOW_DAYS
from deepsummit.core.sections import FeaturesConfig
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


def newest_dated_year(con: duckdb.DuckDBPyConnection) -> int:
    """The newest expedition year of a candidate that may become an attempt (dated, labelled,
    on a known peak): where the split counts back from."""
    candidates = con.table("attempt_candidates").filter("reason IS NULL")
    newest = candidates.aggregate("max(year)").fetchall()[0][0]
    if newest is None:
        raise PipelineError("features: no record with an expedition date and an outcome")
    return newest


def build_attempts(
    con: duckdb.DuckDBPyConnection, config: FeaturesConfig, source: str, test_until: int
) -> pl.DataFrame:
    """Build `weather_windows`, `attempts` and `attempt_exclusions` from `attempt_candidates`
    (deepsummit/features/tabular.py `build_history` writes them) and the weather of `source`, no
    attempt after `test_until`; return the windows (one per (peakid, date) any candidate
    needs)."""
    targets = query(con, "features_window_targets")
    windows = compute_windows(con, targets, source)
    with registered(con, windows_frame=windows):
        run(con, "features_weather_windows_table", {"source": source})
    run(
        con,
        "features_attempt_status",
        {
            "max_missing_days": config.max_missing_days,
            "window_days": WINDOW_DAYS,
            "test_until": test_until,
        },
    )
    run(con, "features_attempts")
    return windows


def exclusion_counts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Candidates kept out of the attempts, per reason (reasons in test order), whichever record
    they come from."""
    exclusions = con.table("attempt_exclusions")
    counts = dict(exclusions.aggregate("reason, sum(members)::BIGINT", "reason").fetchall())
    order = {reason: position for position, reason in enumerate(EXCLUSION_REASONS)}
    return {reason: counts[reason] for reason in sorted(counts, key=lambda r: order.get(r, 99))}
