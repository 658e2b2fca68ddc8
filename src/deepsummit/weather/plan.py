"""Turn the missing spans into Open-Meteo requests.

A request has one start/end date and a list of coordinates. Peaks share a request when the
union of their spans costs no more weighted calls than separate requests (within
`max_merge_overhead`): identical spans always merge, which saves requests at no cost. Spans so
long that one request would not fit the per-minute budget are split.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

import polars as pl

from deepsummit.core.inputs import WEATHER_VARIABLES
from deepsummit.core.weather_sections import WeatherConfig
from deepsummit.weather.cost import REFERENCE_DAYS, max_days_for, weighted_calls


@dataclass(frozen=True)
class Location:
    peakid: str
    latitude: float
    longitude: float
    elevation: float | None  # None: Open-Meteo's own terrain height


@dataclass(frozen=True)
class PlannedRequest:
    start: date
    end: date
    locations: tuple[Location, ...]
    variables: tuple[str, ...] = WEATHER_VARIABLES

    @property
    def days(self) -> int:
        return (self.end - self.start).days + 1

    @property
    def weight(self) -> float:
        return weighted_calls(len(self.variables), self.days, len(self.locations))

    @property
    def weight_per_location(self) -> float:
        return weighted_calls(len(self.variables), self.days)

    def params(self, config: WeatherConfig) -> dict[str, Any]:
        """Query parameters for the archive API (the client adds `format=flatbuffers`)."""
        params: dict[str, Any] = {
            "latitude": ",".join(f"{loc.latitude:.4f}" for loc in self.locations),
            "longitude": ",".join(f"{loc.longitude:.4f}" for loc in self.locations),
            "start_date": self.start.isoformat(),
            "end_date": self.end.isoformat(),
            "daily": ",".join(self.variables),
            "models": config.weather_model,
            "timezone": config.timezone,
        }
        if any(loc.elevation is not None for loc in self.locations):
            params["elevation"] = ",".join(
                "nan" if loc.elevation is None else f"{loc.elevation:g}" for loc in self.locations
            )
        return params

    def request_id(self, config: WeatherConfig) -> str:
        """A stable id of what was asked (same parameters, same id)."""
        text = json.dumps(self.params(config), sort_keys=True)
        return "om-" + hashlib.sha256(text.encode()).hexdigest()[:16]


def _elevation(heightm: int | None, config: WeatherConfig) -> float | None:
    if config.elevation == "peak":
        return float(heightm) if heightm is not None else None
    return float(config.elevation)


def _chunks(start: date, end: date, max_days: int) -> list[tuple[date, date]]:
    if (end - start).days < max_days:  # also keeps a huge budget away from timedelta
        return [(start, end)]
    pieces = []
    while start <= end:
        piece_end = min(end, start + timedelta(days=max_days - 1))
        pieces.append((start, piece_end))
        start = piece_end + timedelta(days=1)
    return pieces


def _merge_cost_ok(
    group: list[tuple[date, date]], span: tuple[date, date], overhead: float
) -> bool:
    spans = [*group, span]
    union_days = (max(e for _, e in spans) - min(s for s, _ in spans)).days + 1
    variables = len(WEATHER_VARIABLES)
    merged = weighted_calls(variables, union_days, len(spans))
    separate = sum(weighted_calls(variables, (e - s).days + 1) for s, e in spans)
    return merged <= separate * (1 + overhead) + 1e-9


def plan_requests(spans: pl.DataFrame, config: WeatherConfig) -> list[PlannedRequest]:
    """Requests covering `spans` (peakid, start_date, end_date, latitude, longitude, heightm)."""
    # Half the per-minute budget per request leaves room for the limiter to interleave.
    max_days = max_days_for(len(WEATHER_VARIABLES), config.limits.per_minute / 2)
    pieces: list[tuple[date, date, Location]] = []
    for row in spans.sort("start_date", "end_date", "peakid").iter_rows(named=True):
        location = Location(
            row["peakid"], row["latitude"], row["longitude"], _elevation(row["heightm"], config)
        )
        for start, end in _chunks(row["start_date"], row["end_date"], max_days):
            pieces.append((start, end, location))

    # Pieces come sorted by start, so groups are too; a group that starts more than `horizon`
    # days earlier would stretch this location's span past what the overhead allows.
    horizon = REFERENCE_DAYS + int(config.max_merge_overhead * max_days)
    groups: list[tuple[list[tuple[date, date]], list[Location]]] = []
    for start, end, location in pieces:
        target = None
        for spans_, locations in reversed(groups):
            if (start - spans_[0][0]).days > horizon:
                break
            if (
                len(locations) < config.max_locations_per_request
                and location not in locations
                and _merge_cost_ok(spans_, (start, end), config.max_merge_overhead)
            ):
                target = (spans_, locations)
                break
        if target is None:
            groups.append(([(start, end)], [location]))
        else:
            target[0].append((start, end))
            target[1].append(location)
    return [
        PlannedRequest(
            start=min(s for s, _ in spans_),
            end=max(e for _, e in spans_),
            locations=tuple(locations),
        )
        for spans_, locations in groups
    ]
