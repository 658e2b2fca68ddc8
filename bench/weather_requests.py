"""Requests and weighted calls: merged spans (this pipeline) vs one request per attempt window.

Both strategies go through the real openmeteo-requests client to the local Open-Meteo server
(tests/openmeteo_server.py), which counts requests and weighted calls itself, in one run. The
server has data only for the eight archive peaks, so the served comparison is restricted to
their attempts; the planner's computed counts for all fetchable peaks are printed as well.

    .venv/bin/python bench/weather_requests.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import duckdb

PROJECT_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT_ROOT / "tests"))

from openmeteo_server import OpenMeteoServer  # noqa: E402
from weather_fixtures import load_bundle_tables, weather_settings  # noqa: E402

from pipeline.config import Settings  # noqa: E402
from pipeline.context import RunContext  # noqa: E402
from pipeline.features.spec import WINDOW_DAYS  # noqa: E402
from pipeline.warehouse import connect, query  # noqa: E402
from pipeline.weather import load_weather, needs, store  # noqa: E402
from pipeline.weather.cost import RateLimiter  # noqa: E402
from pipeline.weather.openmeteo import OpenMeteoSource  # noqa: E402
from pipeline.weather.plan import Location, PlannedRequest, plan_requests  # noqa: E402

UNLIMITED = {"per_minute": 1e12, "per_hour": 1e12, "per_day": 1e12}


def per_window_plan(con: duckdb.DuckDBPyConnection, settings: Settings) -> list[PlannedRequest]:
    """The seed system's plan: one 90-day request per unique (peak, date) with members."""
    rows = query(con, "weather_attempt_dates").iter_rows(named=True)
    return [
        PlannedRequest(
            start=max(r["smtdate"] - timedelta(days=WINDOW_DAYS - 1), settings.weather.first_date),
            end=r["smtdate"],
            locations=(Location(r["peakid"], r["latitude"], r["longitude"], r["heightm"]),),
        )
        for r in rows
        if r["smtdate"] >= settings.weather.first_date  # no ERA5 data before 1940
    ]


def computed(plan: list[PlannedRequest]) -> tuple[int, float]:
    return len(plan), sum(request.weight for request in plan)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, OpenMeteoServer() as server:
        tmp_path = Path(tmp)
        settings = weather_settings(
            tmp_path, source="open-meteo", api_url=server.url, limits=UNLIMITED
        )
        archive_peaks = sorted({p for p, _, _ in server.archive.peaks})
        with connect(settings.paths.warehouse) as con:
            load_bundle_tables(con)
            store.ensure_tables(con)
            needs.prepare_needed_days(con)
            all_merged = computed(
                plan_requests(
                    needs.missing_spans(con, "open-meteo", settings.weather), settings.weather
                )
            )
            all_windows = computed(per_window_plan(con, settings))
            # Only the eight archive peaks have data on the local server.
            con.execute("DELETE FROM expeditions WHERE peakid NOT IN ?", [archive_peaks])
            needs.prepare_needed_days(con)
            windows = per_window_plan(con, settings)

        started = time.perf_counter()
        report = load_weather(settings, RunContext(tmp_path / "run"))
        merged_s = time.perf_counter() - started
        merged = (server.requests, server.weighted_calls)

        server.reset_counts()
        per_window_settings = weather_settings(
            tmp_path / "per-window", source="open-meteo", api_url=server.url, limits=UNLIMITED
        )
        source = OpenMeteoSource(
            per_window_settings.weather, RateLimiter(per_window_settings.weather.limits)
        )
        started = time.perf_counter()
        for request in windows:
            source.fetch(request)
        window_s = time.perf_counter() - started
        per_window = (server.requests, server.weighted_calls)

    free_day = 10_000
    print(f"attempt windows on the 8 archive peaks ({', '.join(archive_peaks)}), served and")
    print(f"counted by the local Open-Meteo server; merged run complete: {report.complete}\n")
    print("| strategy | requests | weighted calls | free-tier days | wall s |")
    print("| --- | ---: | ---: | ---: | ---: |")
    print(
        f"| one request per attempt window | {per_window[0]:,} | {per_window[1]:,.1f} | "
        f"{per_window[1] / free_day:.2f} | {window_s:.1f} |"
    )
    print(
        f"| merged spans (this pipeline) | {merged[0]:,} | {merged[1]:,.1f} | "
        f"{merged[1] / free_day:.2f} | {merged_s:.1f} |"
    )
    print(
        f"| ratio per-window / merged | {per_window[0] / merged[0]:.2f}× | "
        f"{per_window[1] / merged[1]:.2f}× | | |"
    )
    print("\nall fetchable peaks (computed by the planner, not served):\n")
    print("| strategy | requests | weighted calls |")
    print("| --- | ---: | ---: |")
    print(f"| one request per attempt window | {all_windows[0]:,} | {all_windows[1]:,.1f} |")
    print(f"| merged spans (this pipeline) | {all_merged[0]:,} | {all_merged[1]:,.1f} |")
    print(
        f"| ratio | {all_windows[0] / all_merged[0]:.2f}× | {all_windows[1] / all_merged[1]:.2f}× |"
    )


if __name__ == "__main__":
    main()
