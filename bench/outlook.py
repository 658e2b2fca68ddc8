"""Wall time of one push-day outlook: 16 candidate days for one peak and the 12-member team of
deployments/outlook-team.csv, after the forecast is cached, by the registered champion.

The forecast comes from the local Open-Meteo server of the tests (tests/openmeteo_server.py, run
as a program),
stored in a scratch warehouse that holds a copy of the configured warehouse's peaks; the model is
the configured registry's champion (run `make train` first, with the services up, or point
--tracking-uri at another registry). Prints a markdown table: the cached forecast fetch, the
whole outlook stage (champion download and digest check, 192 planned attempts scored through the
pyfunc, forecast drift, chart, upsert), and the pyfunc's scoring of the 192 rows alone; median
and max over --repeats runs.

    .venv/bin/python bench/outlook.py [--peak EVER] [--repeats 5] [--tracking-uri URI]
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import mlflow
import polars as pl
from _local_weather import local_open_meteo

from deepsummit.core.config import load_settings
from deepsummit.core.context import RunContext
from deepsummit.core.planned import today
from deepsummit.core.warehouse import connect
from deepsummit.serve.outlook import candidate_days, planned_requests, team
from deepsummit.serve.stage import plan_outlook
from deepsummit.weather.forecast import newest_forecast
from deepsummit.weather.stage import load_forecast


def timed(step: Callable[[], object], repeats: int) -> list[float]:
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - started)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peak", default="EVER")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tracking-uri", help="default: mlflow.tracking_uri from config")
    args = parser.parse_args()
    configured = load_settings()
    scratch = Path(tempfile.mkdtemp(prefix="bench-outlook-"))
    warehouse = scratch / "w.duckdb"
    with duckdb.connect(str(warehouse)) as con:
        con.execute("ATTACH ? AS source (READ_ONLY)", [str(configured.paths.warehouse)])
        con.execute("CREATE TABLE peaks AS SELECT * FROM source.peaks")
    with local_open_meteo() as server:
        overrides = {
            "paths": {"warehouse": str(warehouse), "runs_dir": str(scratch / "runs")},
            "forecast": {"api_url": server.forecast_url, "cache_path": str(scratch / "cache")},
            "outlook": {"peaks": [args.peak], "days": 16},
        }
        if args.tracking_uri:
            overrides["mlflow"] = {"tracking_uri": args.tracking_uri}
        settings = load_settings(overrides=overrides)
        context = RunContext(scratch / "run")
        load_forecast(settings, context)  # the first fetch fills the cache
        rows = {
            "forecast (cached)": timed(lambda: load_forecast(settings, context), args.repeats),
            "outlook stage, end to end": timed(
                lambda: plan_outlook(settings, context), args.repeats
            ),
        }
        members = team(settings.outlook)
        with connect(warehouse, read_only=True) as con:
            forecast = newest_forecast(con, [args.peak])
        days = candidate_days(today(settings.weather.timezone), 16)
        requests = planned_requests(
            settings.outlook,
            members,
            args.peak,
            days,
            forecast.daily.filter(pl.col("peakid") == args.peak),
            forecast.sources[args.peak],
        )
        mlflow.set_tracking_uri(settings.mlflow.tracking_uri)
        name, alias = settings.mlflow.registered_model, settings.mlflow.champion_alias
        model = mlflow.pyfunc.load_model(f"models:/{name}@{alias}")
        rows[f"pyfunc scoring of {len(requests)} rows"] = timed(
            lambda: model.predict(requests), args.repeats
        )
        requests_served, _ = server.counts()
        print(f"served {requests_served} forecast requests (1 fetch, the rest from the cache)")
    print(
        f"\n{args.peak}, {len(days)} days × {len(members)} members, champion "
        f"{settings.mlflow.tracking_uri}; {platform.processor() or platform.machine()}, "
        f"{dt.date.today()}\n"
    )
    print("| step | median s | max s |")
    print("| --- | ---: | ---: |")
    for step, seconds in rows.items():
        print(f"| {step} | {statistics.median(seconds):.2f} | {max(seconds):.2f} |")


if __name__ == "__main__":
    main()
