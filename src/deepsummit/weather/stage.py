"""The weather stages: fill weather_daily from the configured source for the attempts' windows
(`load_weather`), and store the forecast of the outlook's peaks (`load_forecast`).

Stopping at Open-Meteo's daily limit: everything fetched so far is already stored (each
request in its own transaction); `load_weather` writes the report to the run folder and then
raises QuotaExhausted, whose one line says what is stored, what is missing and that a rerun
fetches the rest. The CLI prints that line and exits 1; the next run asks only for the
missing days. Rejected responses do not raise: the report lists them and `complete` is False.
The rate limiter starts from the calls `weather_api_calls` holds for the last 24 hours, so a
rerun the same day does not spend the daily budget twice.

The warehouse is held only while this stage reads or writes it: once to read what is missing,
once per stored response (deepsummit.weather.openmeteo), once to report; never across a request
or a rate-limit wait, so another stage waiting for it is not held up by the API.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import duckdb

from deepsummit.core.config import Settings
from deepsummit.core.context import Progress, RunContext
from deepsummit.core.errors import QuotaExhausted
from deepsummit.core.planned import today
from deepsummit.core.warehouse import connect, query
from deepsummit.core.weather_sections import WeatherConfig
from deepsummit.weather import archive, ledger, needs, openmeteo, store
from deepsummit.weather.cost import DAY_S, RateLimiter
from deepsummit.weather.forecast import (
    ForecastReport,
    ForecastSource,
    forecast_locations,
    forecast_plan,
    forecast_report,
    untrusted_peaks,
)
from deepsummit.weather.openmeteo import OpenWarehouse
from deepsummit.weather.plan import plan_requests
from deepsummit.weather.report import PeakWeather, WeatherReport

REPORT_FILE = "weather_report.md"


def _archive_peaks(con: duckdb.DuckDBPyConnection) -> dict[str, bool]:
    """Each peak the records know -> whether weather may be stored for it."""
    return dict(query(con, "weather_archive_peaks").iter_rows())


def _prepare(con: duckdb.DuckDBPyConnection) -> None:
    """The tables and this connection's temp tables of the days the attempts need."""
    store.ensure_tables(con)
    needs.prepare_needed_days(con)


def _report(
    con: duckdb.DuckDBPyConnection,
    settings: Settings,
    skipped: tuple[needs.SkippedPeak, ...],
    outcome: openmeteo.FetchOutcome,
) -> WeatherReport:
    source = settings.weather.source
    peaks = tuple(
        PeakWeather(
            peakid=row["peakid"],
            stored_days=row["stored_days"],
            needed_days=row["needed_days"],
            missing_days=row["missing_days"],
            quarantined_days=row["quarantined_days"],
            before_first_date=row["before_first_date"],
            requests=outcome.requests.get(row["peakid"], 0),
            weighted_calls=outcome.weighted_calls.get(row["peakid"], 0.0),
        )
        for row in needs.coverage(con, source, settings.weather).iter_rows(named=True)
    )
    rows, digest = store.content_digest(con)
    return WeatherReport(
        source=source,
        peaks=peaks,
        skipped=skipped,
        requests=sum(outcome.requests.values()),
        weighted_calls=sum(outcome.weighted_calls.values()),
        fetched=outcome.fetched,
        stored=outcome.stored,
        quarantined=outcome.quarantined,
        rejected_rows=outcome.rejected_rows,
        rejected=tuple(outcome.rejected),
        stopped=outcome.stopped,
        rows=rows,
        digest=digest,
    )


def _load_archive(open_warehouse: OpenWarehouse, settings: Settings) -> openmeteo.FetchOutcome:
    """The bundled file, read and stored in one transaction (no API to wait for)."""
    with open_warehouse() as con:
        _prepare(con)
        loaded = archive.load_archive(
            con, Path(settings.data_location(settings.weather.archive_path)), _archive_peaks(con)
        )
    return openmeteo.FetchOutcome(
        fetched=loaded.rows_read, stored=loaded.stored, quarantined=loaded.quarantined
    )


def _fetch_open_meteo(
    open_warehouse: OpenWarehouse,
    config: WeatherConfig,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
    progress: Progress,
) -> openmeteo.FetchOutcome:
    """Plan from what is missing and what the last 24 hours spent, then fetch with the
    warehouse closed (openmeteo.fetch_requests opens it per stored response)."""
    with open_warehouse() as con:
        _prepare(con)
        spans = needs.missing_spans(con, config.source, config)
        sent_earlier = ledger.calls_since(con, config.api_url, clock() - DAY_S)
    limiter = RateLimiter(config.limits, clock=clock, sleep=sleep)
    limiter.calls.extend(sent_earlier)
    source = openmeteo.OpenMeteoSource(config, limiter, sleep=sleep)
    plan = plan_requests(spans, config)
    return openmeteo.fetch_requests(open_warehouse, source, plan, progress)


def load_weather(
    settings: Settings,
    context: RunContext,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.time,
) -> WeatherReport:
    """Store the weather the attempts need from settings.weather.source ("archive" or
    "open-meteo"); `sleep`/`clock` drive the rate limiter and backoff (tests inject them)."""
    config = settings.weather
    open_warehouse = partial(
        connect, settings.paths.warehouse, lock_timeout_s=settings.warehouse.lock_timeout_s
    )
    if config.source == "archive":
        outcome = _load_archive(open_warehouse, settings)
    else:
        outcome = _fetch_open_meteo(open_warehouse, config, sleep, clock, context.progress)
    with open_warehouse() as con:
        _prepare(con)
        skipped = needs.skipped_peaks(con)
        report = _report(con, settings, skipped, outcome)
    context.run_dir.mkdir(parents=True, exist_ok=True)
    (context.run_dir / REPORT_FILE).write_text(report.render() + "\n")
    if report.stopped:
        raise QuotaExhausted(
            f"weather: {report.stopped}; stored {report.stored:,} rows this run, "
            f"{report.missing_days:,} needed days still missing "
            f"(report: {context.run_dir / REPORT_FILE}); run `deepsummit weather` again later, "
            "it fetches only what is missing"
        )
    return report


def load_forecast(
    settings: Settings,
    context: RunContext,
    peakids: list[str] | None = None,
    sleep: Callable[[float], None] | None = None,
    clock: Callable[[], float] | None = None,
) -> ForecastReport:
    """The forecast stage: fetch (or take from the cache) and store the forecast of each peak
    in `peakids` (default: the outlook's peaks; deepsummit/weather/forecast.py)."""
    peakids = list(peakids or settings.outlook.peaks)
    forecast = settings.forecast
    # The archive client's settings, pointed at the forecast endpoint and its own cache.
    config = settings.weather.model_copy(
        update={"api_url": forecast.api_url, "cache_path": forecast.cache_path}
    )
    open_warehouse = partial(
        connect, settings.paths.warehouse, lock_timeout_s=settings.warehouse.lock_timeout_s
    )
    timing: dict[str, Any] = {k: v for k, v in (("sleep", sleep), ("clock", clock)) if v}
    with open_warehouse() as con:
        store.ensure_tables(con)
        if settings.outlook.without_weather:  # the outlook answers those without weather
            untrusted = untrusted_peaks(con, peakids)
            peakids = [peakid for peakid in peakids if peakid not in untrusted]
        locations = forecast_locations(con, peakids, config)
        limiter = RateLimiter(config.limits, **timing)
        limiter.calls.extend(ledger.calls_since(con, config.api_url, limiter.clock() - DAY_S))
    source = ForecastSource(
        config,
        limiter,
        expire_after_s=forecast.cache_expire_s,
        **({"sleep": sleep} if sleep else {}),
    )
    plan = forecast_plan(forecast, locations, today(config.timezone))
    outcome = openmeteo.fetch_requests(open_warehouse, source, plan, context.progress)
    if outcome.stopped:
        raise QuotaExhausted(f"forecast: {outcome.stopped}")
    with open_warehouse(read_only=True) as con:
        return forecast_report(con, plan, outcome)
