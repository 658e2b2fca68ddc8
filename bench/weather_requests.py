"""Requests and weighted calls: merged spans (this pipeline) vs one request per attempt window.

Both strategies go through the real openmeteo-requests client to the local Open-Meteo server
(tests/openmeteo_server.py, run as a program), which counts requests and weighted calls itself,
in one run. The clean tables come from the records stage on the bundle. The
server has data only for the eight archive peaks, so the served comparison is restricted to
their attempts; the planner's computed counts for all fetchable peaks are printed as well.

    .venv/bin/python bench/weather_requests.py
"""

from __future__ import annotations

import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
from _local_weather import local_open_meteo

from deepsummit.core.config import Settings, load_settings
from deepsummit.core.context import RunContext
from deepsummit.core.inputs import WINDOW_DAYS
from deepsummit.core.warehouse import connect, query
from deepsummit.records.stage import ingest_records
from deepsummit.weather import load_weather, needs, store
from deepsummit.weather.cost import RateLimiter
from deepsummit.weather.openmeteo import OpenMeteoSource
from deepsummit.weather.plan import Location, PlannedRequest, plan_requests

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


def open_meteo_settings(root: Path, api_url: str) -> Settings:
    """Settings on a warehouse under `root`, fetching from `api_url` without rate limits."""
    weather: dict[str, Any] = {
        "source": "open-meteo",
        "api_url": api_url,
        "limits": UNLIMITED,
        "cache_path": str(root / "cache"),
    }
    paths = {"warehouse": str(root / "w.duckdb"), "var_dir": str(root), "runs_dir": str(root)}
    return load_settings(overrides={"paths": paths, "weather": weather})


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, local_open_meteo() as server:
        tmp_path = Path(tmp)
        settings = open_meteo_settings(tmp_path, server.archive_url)
        ingest_records(settings, RunContext(tmp_path / "ingest"))
        archive_peaks = sorted(
            pl.read_csv(settings.paths.data_dir / "weather/era5_peaks.csv")["peakid"]
        )
        with connect(settings.paths.warehouse) as con:
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
        merged = server.counts()

        per_window_settings = open_meteo_settings(tmp_path / "per-window", server.archive_url)
        source = OpenMeteoSource(
            per_window_settings.weather, RateLimiter(per_window_settings.weather.limits)
        )
        started = time.perf_counter()
        for request in windows:
            source.fetch(request)
        window_s = time.perf_counter() - started
        total = server.counts()
        per_window = (total[0] - merged[0], total[1] - merged[1])

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
