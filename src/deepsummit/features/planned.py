"""The warehouse's attempts in the planned-attempt layout (deepsummit/core/planned.py), with
their weather: the test split as the registered model is asked for it (the gate re-scores a
champion on it; the tests serve it)."""

from __future__ import annotations

import duckdb
import polars as pl

from deepsummit.core.inputs import WEATHER_VARIABLES
from deepsummit.core.planned import KEY_COLUMNS
from deepsummit.core.warehouse import registered, sql


def planned_attempts(
    con: duckdb.DuckDBPyConnection, keys: pl.DataFrame, source: str
) -> pl.DataFrame:
    """Attempts of the warehouse (`keys`: expid, member_id, year) in this layout, with their
    weather from `source`, keyed by KEY_COLUMNS (deepsummit/sql/serving_planned_attempts.sql)."""
    lists = ",\n        ".join(
        f'list(w."{name}" ORDER BY d.days_back DESC) AS "{name}"' for name in WEATHER_VARIABLES
    )
    text = sql("serving_planned_attempts").replace("{{weather_lists}}", lists)
    with registered(con, planned_keys=keys.select(KEY_COLUMNS)):
        return con.sql(text, params={"source": source}).pl()
