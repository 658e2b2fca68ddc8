"""Leak-free tabular features of attempts, past or planned, by one SQL step.

`sql/features_tabular.sql` reads the attempts from a relation named `attempt_input` (the
columns of `ATTEMPT_INPUT_SCHEMA`) and everything else from the warehouse's clean tables, so the
build (all attempts) and prediction (one planned attempt) compute features the same way.
"""

from __future__ import annotations

import duckdb
import polars as pl

from pipeline.errors import PipelineError
from pipeline.features.spec import (
    BINARY_FEATURES,
    CATEGORICAL_FEATURES,
    NUMERIC_FEATURES,
)
from pipeline.warehouse import query

# What an attempt must say about itself: the expedition and the member as planned. No outcome.
ATTEMPT_INPUT_SCHEMA: dict[str, pl.DataType] = {
    "expid": pl.String(),
    "member_id": pl.String(),
    "year": pl.Int32(),
    "season": pl.String(),
    "peakid": pl.String(),
    "smtdate": pl.Date(),
    "route1": pl.String(),
    "style": pl.String(),
    "totmembers": pl.Int32(),
    "commercial": pl.Boolean(),
    "o2used": pl.Boolean(),
    "sex": pl.String(),
    "age": pl.Int32(),
    "citizenship": pl.String(),
    "expedition_role": pl.String(),
    "hired": pl.Boolean(),
    "oxygen_used": pl.Boolean(),
    "climber_id": pl.String(),
}
ATTEMPT_KEYS: tuple[str, ...] = ("expid", "member_id", "year", "smtdate")
TABULAR_FEATURES: tuple[str, ...] = (*NUMERIC_FEATURES, *CATEGORICAL_FEATURES, *BINARY_FEATURES)


def attempt_features(
    con: duckdb.DuckDBPyConnection,
    attempts: pl.DataFrame,
    weather_source: str,
    prior_strength: float,
) -> pl.DataFrame:
    """Attempt keys, the weather window key (peakid, smtdate, weather_source) and the 20
    tabular features of each row of `attempts` (columns of `ATTEMPT_INPUT_SCHEMA`; extra
    columns are ignored, so an outcome column given here cannot reach the features).

    `prior_strength` is `settings.features.success_rate_prior_strength` of the build; a
    prediction passes the value its model was trained with (saved in preprocessing.json)."""
    missing = [name for name in ATTEMPT_INPUT_SCHEMA if name not in attempts.columns]
    if missing:
        raise PipelineError(f"attempts to featurise lack column(s): {', '.join(missing)}")
    con.register("attempt_input", attempts.select(*ATTEMPT_INPUT_SCHEMA).cast(ATTEMPT_INPUT_SCHEMA))
    try:
        features = query(con, "features_tabular", {"prior_strength": prior_strength})
    finally:
        con.unregister("attempt_input")
    return features.with_columns(pl.lit(weather_source).alias("weather_source")).select(
        *ATTEMPT_KEYS, "weather_source", *TABULAR_FEATURES
    )
