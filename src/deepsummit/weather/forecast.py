"""Weather for days that have not happened yet: the Open-Meteo forecast API (`/v1/forecast`),
through the same `openmeteo-requests` client, cache, retries and rate limiter as the archive.

One request per peak covers a whole 90-day window and the two weeks ahead: `past_days` (up to
92) of recent days and `forecast_days` (up to 16) from today, in the Nepal calendar. Each answer
is stored in weather_daily under its own source, `forecast@<issue time>`: the time Open-Meteo
answered (a cached answer keeps its time), so an outlook says exactly which forecast fed it and
can be computed again from it. Answers are cached for `forecast.cache_expire_s`, not for good.

How it differs from what the model was trained on (the archive, data/README.md §4): the
forecast's daily values are true daily aggregates (maximum over the day, 24-hour sums) at the
summit's coordinates and elevation, from Open-Meteo's best-matching weather models (ECMWF IFS,
GFS, ICON… at 9-25 km), while the archive's are pre-dawn single-hour values of a 3°×3° ERA5 box
mean at 2.5-3 km. The model is only ever trained on one source, and every outlook names the
source that fed it next to the one the model learnt from.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from deepsummit.core.errors import BadInput
from deepsummit.core.warehouse import query
from deepsummit.core.weather_sections import ForecastConfig, WeatherConfig
from deepsummit.weather import openmeteo, store
from deepsummit.weather.plan import Location, PlannedRequest

FORECAST = "forecast"
# Coordinates a person can rely on for a summit forecast (peaks.csv's coord_source): published
# summit coordinates, or a sub-summit placed at its parent's.
TRUSTED_COORDINATES = ("published", "parent-summit")


ISSUE_FORMAT = "%Y-%m-%dT%H:%MZ"  # UTC, to the minute


def issue_source(issued: dt.datetime) -> str:
    """The weather_daily source of a forecast issued at `issued`."""
    return f"{FORECAST}@{issued.astimezone(dt.UTC):{ISSUE_FORMAT}}"


def issued_at(source: str) -> dt.datetime:
    """The issue time (UTC, naive) of a forecast source `forecast@<issue time>`."""
    return dt.datetime.strptime(source.removeprefix(f"{FORECAST}@"), ISSUE_FORMAT)


@dataclass(frozen=True)
class ForecastRequest(PlannedRequest):
    """One peak: `past_days` before today and `forecast_days` from today (local calendar)."""

    past_days: int = 92
    forecast_days: int = 16

    def params(self, config: WeatherConfig) -> dict[str, Any]:
        (location,) = self.locations
        params: dict[str, Any] = {
            "latitude": f"{location.latitude:.4f}",
            "longitude": f"{location.longitude:.4f}",
            "daily": ",".join(self.variables),
            "timezone": config.timezone,
            "past_days": self.past_days,
            "forecast_days": self.forecast_days,
        }
        if location.elevation is not None:
            params["elevation"] = f"{location.elevation:g}"
        return params


class ForecastSource(openmeteo.OpenMeteoSource):
    """Answers stored under the source of their issue time."""

    def source_name(self) -> str:
        return issue_source(self.watch.created_at or dt.datetime.now(dt.UTC))


@dataclass(frozen=True)
class PeakForecast:
    peakid: str
    source: str | None  # forecast@<issue time> of the stored answer, None if none came
    first_day: dt.date
    last_day: dt.date
    stored_days: int


@dataclass(frozen=True)
class ForecastReport:
    peaks: tuple[PeakForecast, ...]
    requests: int
    weighted_calls: float
    rejected: tuple[str, ...]
    rows: int  # forecast rows in weather_daily, every issue
    digest: str  # of those rows

    @property
    def problem(self) -> str | None:
        """Why this is not the stage's result yet (a retry asks again), or None."""
        if not self.rejected:
            return None
        return f"{len(self.rejected)} forecast responses rejected; a retry asks again"

    def render(self) -> str:
        lines = [f"forecast: {self.requests} requests, {self.weighted_calls:.1f} weighted calls"]
        lines += [
            f"  {p.peakid:<6} {p.source or 'no answer':<28} {p.first_day} … {p.last_day} "
            f"({p.stored_days} days)"
            for p in self.peaks
        ]
        lines += [f"  rejected response: {reason}" for reason in self.rejected]
        return "\n".join(lines)


def _forecast_peaks(con: Any, peakids: list[str]) -> dict[str, dict[str, Any]]:
    """Each peak's row of sql/forecast_peaks.sql, in `peakids` order (an unknown peak id is an
    error)."""
    found = {
        row["peakid"]: row
        for row in query(con, "forecast_peaks", {"peakids": peakids}).iter_rows(named=True)
    }
    for peakid in peakids:
        if peakid not in found:
            raise BadInput(f"unknown peak {peakid!r}: not in the warehouse's peaks table")
    return {peakid: found[peakid] for peakid in peakids}


def _untrusted(rows: dict[str, dict[str, Any]]) -> dict[str, str]:
    return {
        peakid: (
            f"{peakid}: no day-by-day outlook, there are no trusted coordinates for a summit "
            f"forecast (coord_source {row['coord_source']!r}; trusted: "
            f"{', '.join(TRUSTED_COORDINATES)})"
        )
        for peakid, row in rows.items()
        if row["coord_source"] not in TRUSTED_COORDINATES
    }


def untrusted_peaks(con: Any, peakids: list[str]) -> dict[str, str]:
    """The peaks of `peakids` that cannot have a summit forecast, each with its one-line reason
    (an unknown peak id is an error)."""
    return _untrusted(_forecast_peaks(con, peakids))


def forecast_locations(con: Any, peakids: list[str], config: WeatherConfig) -> dict[str, Location]:
    """Each peak's location; a peak that is unknown or whose coordinates are not trusted is
    one clear line."""
    rows = _forecast_peaks(con, peakids)
    untrusted = _untrusted(rows)
    if untrusted:
        first = next(iter(untrusted.values()))
        raise BadInput(
            f"{first}; set published coordinates in peaks.csv, or ask with --without-weather "
            "(outlook.without_weather) for the plan's P without weather"
        )
    locations = {}
    for peakid, row in rows.items():
        elevation = float(row["heightm"]) if config.elevation == "peak" and row["heightm"] else None
        if config.elevation != "peak":
            elevation = float(config.elevation)
        locations[peakid] = Location(peakid, row["latitude"], row["longitude"], elevation)
    return locations


def forecast_plan(
    config: ForecastConfig, locations: dict[str, Location], first_day: dt.date
) -> list[ForecastRequest]:
    """One request per peak: its 90-day window's recent days and the days ahead."""
    return [
        ForecastRequest(
            start=first_day - dt.timedelta(days=config.past_days),
            end=first_day + dt.timedelta(days=config.forecast_days - 1),
            locations=(location,),
            past_days=config.past_days,
            forecast_days=config.forecast_days,
        )
        for location in locations.values()
    ]


def forecast_report(
    con: Any, plan: list[ForecastRequest], outcome: openmeteo.FetchOutcome
) -> ForecastReport:
    """What the requests of `plan` stored, by peak, as the warehouse holds it now."""
    newest = newest_forecast(con, [request.locations[0].peakid for request in plan])
    rows, digest = store.content_digest(con, forecasts=True)
    days = newest.daily.group_by("peakid").len() if newest.daily.height else pl.DataFrame()
    stored = dict(days.iter_rows()) if days.height else {}
    return ForecastReport(
        peaks=tuple(
            PeakForecast(
                peakid=request.locations[0].peakid,
                source=newest.sources.get(request.locations[0].peakid),
                first_day=request.start,
                last_day=request.end,
                stored_days=stored.get(request.locations[0].peakid, 0),
            )
            for request in plan
        ),
        requests=sum(outcome.requests.values()),
        weighted_calls=sum(outcome.weighted_calls.values()),
        rejected=tuple(outcome.rejected),
        rows=rows,
        digest=digest,
    )


@dataclass(frozen=True)
class ForecastWeather:
    """The newest stored forecast of each peak: its source and its daily rows."""

    sources: dict[str, str] = field(default_factory=dict)  # peakid → forecast@<issue time>
    daily: pl.DataFrame = field(default_factory=pl.DataFrame)


def newest_forecast(con: Any, peakids: list[str]) -> ForecastWeather:
    """The newest stored forecast of each peak in `peakids` (peaks without one are left out)."""
    rows = query(con, "forecast_newest", {"peakids": peakids})
    sources = dict(rows.select("peakid", "source").unique().iter_rows())
    return ForecastWeather(sources, rows)
