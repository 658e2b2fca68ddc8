"""Multi-scale weather windows: 26 tokens × 16 channels per (peak, date), built in SQL.

The token layout comes from `spec.WINDOW_SCALES` as a small `window_days` table (token → the
days before the window date it averages); `deepsummit/sql/features_weather_windows.sql` computes
every window at once from it. The same query serves the build (all attempt dates) and serving (each
planned attempt's own 90 days, deepsummit/serve/scoring.py).
"""

from __future__ import annotations

import duckdb
import polars as pl

from deepsummit.contracts.preprocessing import WINDOW_KEY
from deepsummit.core.inputs import (
    DIRECTION_CHANNELS,
    DIRECTION_VARIABLE,
    WEATHER_VARIABLES,
    WINDOW_SCALES,
)
from deepsummit.core.warehouse import registered, sql


def window_days() -> pl.DataFrame:
    """One row per (token, day): the token's scale, the day's distance before the window date
    and the token's middle day (the newer of the two central days for an even span).

    Tokens run in the spec's order: the scales as listed, oldest bucket first within each."""
    rows = []
    token = 0
    for scale in WINDOW_SCALES:
        width = scale.days_per_token
        for bucket in range(scale.tokens):
            newest = (scale.tokens - 1 - bucket) * width
            middle = newest + (width - 1) // 2
            rows += [
                {
                    "token": token,
                    "scale": scale.name,
                    "days_before": newest + offset,
                    "middle_days_before": middle,
                }
                for offset in range(width)
            ]
            token += 1
    return pl.DataFrame(
        rows,
        schema={
            "token": pl.Int32,
            "scale": pl.String,
            "days_before": pl.Int32,
            "middle_days_before": pl.Int32,
        },
    )


# Each mean sums its days exactly, as fixed-point decimals (a 128-bit integer sum): summed as
# doubles in the parallel join's order, a rebuild would differ in the last bits, change the
# snapshot's digest and retrain on unchanged data. 9 decimals are far below a float32 feature's
# resolution, and 7.6 times faster than ordering each group's days before a double sum.
EXACT = "DECIMAL(18, 9)"


def _aggregates(variable: str) -> list[str]:
    """The token's aggregate(s) of one stored variable: its mean; for the wind direction, the
    mean of its sine and of its cosine (the components of the mean direction vector, whose
    length says how steady the direction was), never a mean of degrees."""
    column = f'w."{variable}"'

    def mean(value: str, name: str) -> str:
        return f'avg(CAST({value} AS {EXACT}))::DOUBLE AS "{name}"'

    if variable == DIRECTION_VARIABLE:
        sine, cosine = DIRECTION_CHANNELS
        return [mean(f"sin(radians({column}))", sine), mean(f"cos(radians({column}))", cosine)]
    return [mean(column, variable)]


def windows_sql() -> str:
    """The windows query with its per-variable aggregates rendered from the feature spec."""
    aggregates = ",\n        ".join(a for name in WEATHER_VARIABLES for a in _aggregates(name))
    return sql("features_weather_windows").replace("{{weather_aggregates}}", aggregates)


def compute_windows(
    con: duckdb.DuckDBPyConnection, targets: pl.DataFrame, weather_source: str
) -> pl.DataFrame:
    """Windows for every (peakid, date) of `targets`: 26 rows each, ordered by key and token,
    with the 16 weather channels, `days_before`, `day_of_year` and the window's
    `missing_days`."""
    with registered(
        con, window_targets=targets.select(WINDOW_KEY).unique(), window_days=window_days()
    ):
        return con.sql(windows_sql(), params={"source": weather_source}).pl()


# END
