"""Leak-free tabular features of attempts, past or planned, by one SQL step over history tables.

`deepsummit/sql/features_history.sql` turns every record with an outcome (the attempt candidates)
into per-season history tables (members and summits per season, peak, route, agency and climber;
the peaks' facts).
`deepsummit/sql/features_tabular.sql` reads the attempts from a relation named `attempt_input` (the
columns of `ATTEMPT_INPUT_SCHEMA`) and everything else from those history tables. The features stage
builds them from the warehouse; a registered model carries a frozen copy (`HISTORY_TABLES`), so
serving computes a planned attempt's features with the same SQL as training, as of the records it
was trained with.
"""

from __future__ import annotations

import duckdb
import polars as pl

from deepsummit.core.errors import PipelineError
from deepsummit.core.inputs import RARE_FOLDS, TABULAR_INPUTS
from deepsummit.core.seasons import SEASON_OPENING_MONTH
from deepsummit.core.warehouse import query, registered, run

# What an attempt says about itself: the expedition and the member as planned, and the
# expedition's details known before the push. No outcome, except `oxygen_used`, which only the
# retrospective profile's models read (deepsummit/core/inputs.py).
ATTEMPT_INPUT_SCHEMA: dict[str, pl.DataType] = {
    "expid": pl.String(),
    "member_id": pl.String(),
    "year": pl.Int32(),
    "season": pl.String(),
    "peakid": pl.String(),
    "smtdate": pl.Date(),  # the push day D
    "route1": pl.String(),
    "style": pl.String(),
    "totmembers": pl.Int32(),
    "commercial": pl.Boolean(),
    "o2_planned": pl.Boolean(),  # the expedition's oxygen plan
    "agency": pl.String(),
    "hired_staff": pl.Int32(),
    "basecamp_date": pl.Date(),
    "sex": pl.String(),
    "age": pl.Int32(),
    "citizenship": pl.String(),
    "expedition_role": pl.String(),
    "hired": pl.Boolean(),
    "oxygen_used": pl.Boolean(),
    "climber_id": pl.String(),
}
ATTEMPT_KEYS: tuple[str, ...] = ("expid", "member_id", "year", "smtdate")
TABULAR_FEATURES: tuple[str, ...] = tuple(i.name for i in TABULAR_INPUTS)
# The month each season opens, as the relation deepsummit/sql/features_tabular.sql reads.
SEASON_OPENINGS = pl.DataFrame(
    {"season": list(SEASON_OPENING_MONTH), "month": list(SEASON_OPENING_MONTH.values())}
)
# The tables deepsummit/sql/features_tabular.sql reads besides the attempts: built by
# deepsummit/sql/features_history.sql, and frozen into every registered model.
HISTORY_TABLES: tuple[str, ...] = (
    "history_seasons",
    "history_peaks",
    "history_routes",
    "history_agencies",
    "history_climbers",
    "history_peak_facts",
)


def build_history(con: duckdb.DuckDBPyConnection) -> None:
    """From the warehouse's clean tables: `attempt_candidates`, every record with an outcome
    (the attempts are chosen among them: deepsummit/features/attempts.py), and the history
    tables over them and the peaks."""
    run(con, "features_attempt_candidates")
    run(con, "features_history")


def history_frames(con: duckdb.DuckDBPyConnection) -> dict[str, pl.DataFrame]:
    """The history tables as frames (what a model freezes)."""
    return {name: con.table(name).pl() for name in HISTORY_TABLES}


def register_history(con: duckdb.DuckDBPyConnection, frames: dict[str, pl.DataFrame]) -> None:
    """Frozen history frames as the tables deepsummit/sql/features_tabular.sql reads (serving)."""
    for name in HISTORY_TABLES:
        con.register(name, frames[name])


def attempt_features(
    con: duckdb.DuckDBPyConnection, attempts: pl.DataFrame, prior_strength: float
) -> pl.DataFrame:
    """Attempt keys, the weather window key (peakid, smtdate) and every declared tabular input
    of each row of `attempts` (the columns of `ATTEMPT_INPUT_SCHEMA`; extra columns are
    ignored, so an outcome column given here cannot reach the features), from the history
    tables `con` holds.

    `prior_strength` is `features.success_rate_prior_strength` of the build; serving passes the
    value its model was trained with."""
    missing = [name for name in ATTEMPT_INPUT_SCHEMA if name not in attempts.columns]
    if missing:
        raise PipelineError(f"attempts to featurise lack column(s): {', '.join(missing)}")
    attempt_input = attempts.select(*ATTEMPT_INPUT_SCHEMA).cast(ATTEMPT_INPUT_SCHEMA)
    with registered(con, attempt_input=attempt_input, season_openings=SEASON_OPENINGS):
        features = query(con, "features_tabular", {"prior_strength": prior_strength})
    return features.select(*ATTEMPT_KEYS, *TABULAR_FEATURES, *RARE_FOLDS.values())
