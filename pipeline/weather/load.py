"""The weather stage: fill weather_daily from the configured source for the attempts' windows.

Stopping at Open-Meteo's daily limit: everything fetched so far is already stored (each
request in its own transaction); `load_weather` writes the report to the run folder and then
raises QuotaExhausted, whose one line says what is stored, what is missing and that a rerun
fetches the rest. The CLI prints that line and exits 1; the next run asks only for the
missing days. Rejected responses do not raise: the report lists them and `complete` is False.
The rate limiter starts from the calls `weather_api_calls` holds for the last 24 hours, so a
rerun the same day does not spend the daily budget twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import duckdb

from pipeline.config import Settings
from pipeline.context import RunContext
from pipeline.errors import QuotaExhausted
from pipeline.warehouse import connect, query
from pipeline.weather import archive, ledger, needs, openmeteo, store
from pipeline.weather.cost import DAY_S, RateLimiter
from pipeline.weather.plan import plan_requests
from pipeline.weather.report import PeakWeather, WeatherReport

REPORT_FILE = "weather_report.md"


def _fetchable_peaks(con: duckdb.DuckDBPyConnection) -> set[str]:
    return set(query(con, "weather_fetchable_peak_ids")["peakid"])


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
        stored=outcome.stored,
        quarantined=outcome.quarantined,
        rejected=tuple(outcome.rejected),
        stopped=outcome.stopped,
        rows=rows,
        digest=digest,
    )


def load_weather(
    settings: Settings,
    context: RunContext,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.time,
) -> WeatherReport:
    """Store the weather the attempts need from settings.weather.source ("archive" or
    "open-meteo"); `sleep`/`clock` drive the rate limiter and backoff (tests inject them)."""
    config = settings.weather
    with connect(settings.paths.warehouse) as con:
        store.ensure_tables(con)
        skipped = needs.skipped_peaks(con)
        needs.prepare_needed_days(con)
        outcome = openmeteo.FetchOutcome()
        if config.source == "archive":
            loaded = archive.load_archive(
                con, Path(settings.data_location(config.archive_path)), _fetchable_peaks(con)
            )
            outcome.stored, outcome.quarantined = loaded.stored, loaded.quarantined
        else:
            spans = needs.missing_spans(con, config.source, config)
            limiter = RateLimiter(config.limits, clock=clock, sleep=sleep)
            limiter.calls.extend(ledger.calls_since(con, config.api_url, clock() - DAY_S))
            source = openmeteo.OpenMeteoSource(config, limiter, sleep=sleep)
            outcome = openmeteo.fetch_requests(con, source, plan_requests(spans, config))
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
