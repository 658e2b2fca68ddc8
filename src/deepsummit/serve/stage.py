"""The outlook stages: the push-day outlook of the coming days from the newest stored forecast
(`plan_outlook`), and the outlook of a past morning from the stored weather (`replay_outlook`).
deepsummit/serve/outlook.py builds and scores them."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

import polars as pl

from deepsummit.core.config import Settings
from deepsummit.core.context import RunContext
from deepsummit.core.errors import BadInput, ServiceUnavailable
from deepsummit.core.inputs import WINDOW_DAYS
from deepsummit.core.planned import today
from deepsummit.core.warehouse import connect, query
from deepsummit.serve.outlook import (
    OutlookReport,
    candidate_days,
    score_outlook,
    write_outlooks,
)
from deepsummit.serve.outlook_chart import CHART_FILE, plot_outlook
from deepsummit.weather.forecast import forecast_locations, newest_forecast, untrusted_peaks


def plan_outlook(settings: Settings, context: RunContext) -> OutlookReport:
    """The outlook stage: each configured peak's outlook from its newest stored forecast, by
    the champion; upserted into the outlooks table and charted in the run folder. A peak
    without trusted coordinates has no forecast: one line, or with outlook.without_weather,
    the plan's P without weather."""
    config = settings.outlook
    peakids = list(config.peaks)
    with connect(settings.paths.warehouse, read_only=True) as con:
        untrusted = untrusted_peaks(con, peakids) if config.without_weather else {}
        forecasted = [p for p in peakids if p not in untrusted]
        forecast_locations(con, forecasted, settings.weather)  # coordinates still trusted
        forecast = newest_forecast(con, forecasted)
    missing = [p for p in forecasted if p not in forecast.sources]
    if missing:
        raise ServiceUnavailable(
            f"no forecast stored for {', '.join(missing)}: run the forecast first"
        )
    weather = {
        peakid: (forecast.daily.filter(pl.col("peakid") == peakid), forecast.sources[peakid])
        if peakid in forecast.sources
        else (None, untrusted[peakid])
        for peakid in peakids
    }
    first_day = config.first_day or today(settings.weather.timezone)
    report = charted(score_outlook(settings, context, first_day, weather), context)
    return replace(report, rows=write_outlooks(settings, report))


def replay_outlook(settings: Settings, context: RunContext) -> OutlookReport:
    """The outlook a team would have seen on the morning of `outlook.as_of`, by the champion,
    from the stored weather of `weather.source` (the archive: a perfect forecast of the days
    ahead, so it shows what the model reads from the weather, not what a forecast would have
    said). Charted in the run folder; the outlooks table keeps forecasts only. A peak the
    source has no weather of gets, with outlook.without_weather, the plan's P without it."""
    config = settings.outlook
    if config.as_of is None:
        raise BadInput("a replay needs a date: --as-of YYYY-MM-DD (outlook.as_of)")
    source = settings.weather.source
    days = candidate_days(config.as_of, config.days)
    first = days[0] - dt.timedelta(days=WINDOW_DAYS - 1)
    weather: dict[str, tuple[pl.DataFrame | None, str]] = {}
    with connect(settings.paths.warehouse, read_only=True) as con:
        for peakid in config.peaks:
            daily = query(
                con,
                "serving_daily_weather",
                {"peakid": peakid, "source": source, "first": first, "last": days[-1]},
            )
            if daily.is_empty() and config.without_weather:
                weather[peakid] = (None, f"{peakid}: no weather of {source!r} stored")
            else:
                weather[peakid] = (daily, source)
    return charted(score_outlook(settings, context, config.as_of, weather), context)


def charted(report: OutlookReport, context: RunContext) -> OutlookReport:
    """The report with its chart, drawn in the run folder."""
    return replace(report, chart=plot_outlook(report, context.run_dir / CHART_FILE))
