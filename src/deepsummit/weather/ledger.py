"""`weather_api_calls`: the weighted calls each run sent to Open-Meteo, so the next run's rate
limiter starts from what the last 24 hours already used instead of from zero."""

from __future__ import annotations

import duckdb

from deepsummit.core.warehouse import query, run


def calls_since(
    con: duckdb.DuckDBPyConnection, api_url: str, since: float
) -> list[tuple[float, float]]:
    """(sent_at, weighted calls) sent to `api_url` after `since` (Unix seconds), oldest first."""
    recent = query(con, "weather_api_calls_since", {"api_url": api_url, "since": since})
    return list(recent.iter_rows())


def record_calls(
    con: duckdb.DuckDBPyConnection,
    api_url: str,
    sent_at: float,
    weighted_calls: float,
    request_id: str,
) -> None:
    run(
        con,
        "weather_api_calls_insert",
        {
            "api_url": api_url,
            "sent_at": sent_at,
            "weighted_calls": weighted_calls,
            "request_id": request_id,
        },
    )
