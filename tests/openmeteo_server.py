"""A local Open-Meteo-compatible server for the tests (not a mock of the client); benches and
people run it as a program.

Serves `GET /v1/archive` from the bundled ERA5 parquet in the real wire formats: FlatBuffers
(size-prefixed `WeatherApiResponse` messages, one per location, as `openmeteo-requests` parses
them) and JSON with `format=json`. It honours comma-separated latitude/longitude lists,
start_date/end_date, the daily variable list and the timezone (day boundaries and
utc_offset_seconds). The archive only has eight peaks, so each coordinate is served the data of
the nearest of them (era5_peaks.csv); days the archive lacks come back as NaN, as Open-Meteo
does for missing data.

`GET /v1/forecast` answers `past_days` and `forecast_days` around today (in the request's
timezone), as Open-Meteo's forecast API does. Its values are the archive's for the same days of
its newest year (a stand-in forecast: real weather of the right season, not a prediction).

It counts requests and weighted calls with Open-Meteo's own formula (written out here, not
imported, so the pipeline's accounting is checked against an independent count) and injects
faults on demand, one per request in the order given: `inject("429", "500", ...)`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse
from zoneinfo import ZoneInfo

import flatbuffers
import numpy as np
import polars as pl
from openmeteo_sdk.Aggregation import Aggregation
from openmeteo_sdk.Model import Model
from openmeteo_sdk.Unit import Unit
from openmeteo_sdk.Variable import Variable

from deepsummit.core.config import load_settings

DATA_DIR = load_settings().paths.data_dir  # the data bundle the settings point at
FIRST_DAY = date(1940, 1, 1)
MAX_PAST_DAYS, MAX_FORECAST_DAYS = 92, 16  # the forecast API's limits
PATHS = ("/v1/archive", "/v1/forecast")
STATS_PATH = "/stats"  # what it has counted so far, as JSON (for a program that runs it)

# name -> (variable, unit, altitude, aggregation), as Open-Meteo labels its daily variables.
VARIABLES: dict[str, tuple[int, int, int, int]] = {
    "temperature_2m_mean": (Variable.temperature, Unit.celsius, 2, Aggregation.mean),
    "temperature_2m_max": (Variable.temperature, Unit.celsius, 2, Aggregation.maximum),
    "temperature_2m_min": (Variable.temperature, Unit.celsius, 2, Aggregation.minimum),
    "apparent_temperature_mean": (Variable.apparent_temperature, Unit.celsius, 0, Aggregation.mean),
    "apparent_temperature_max": (
        Variable.apparent_temperature,
        Unit.celsius,
        0,
        Aggregation.maximum,
    ),
    "apparent_temperature_min": (
        Variable.apparent_temperature,
        Unit.celsius,
        0,
        Aggregation.minimum,
    ),
    "precipitation_sum": (Variable.precipitation, Unit.millimetre, 0, Aggregation.sum),
    "rain_sum": (Variable.rain, Unit.millimetre, 0, Aggregation.sum),
    "snowfall_sum": (Variable.snowfall, Unit.centimetre, 0, Aggregation.sum),
    "precipitation_hours": (Variable.precipitation_hours, Unit.hours, 0, Aggregation.none),
    "wind_speed_10m_max": (Variable.wind_speed, Unit.kilometres_per_hour, 10, Aggregation.maximum),
    "wind_gusts_10m_max": (Variable.wind_gusts, Unit.kilometres_per_hour, 10, Aggregation.maximum),
    "wind_direction_10m_dominant": (
        Variable.wind_direction,
        Unit.degree_direction,
        10,
        Aggregation.dominant,
    ),
    "shortwave_radiation_sum": (
        Variable.shortwave_radiation,
        Unit.megajoule_per_square_metre,
        0,
        Aggregation.sum,
    ),
    "et0_fao_evapotranspiration": (
        Variable.et0_fao_evapotranspiration,
        Unit.millimetre,
        0,
        Aggregation.sum,
    ),
}
UNIT_LABELS = {Unit.celsius: "°C", Unit.millimetre: "mm", Unit.centimetre: "cm", Unit.hours: "h"}

FAULTS = (
    "429",  # minutely limit, with Retry-After
    "429-no-retry-after",  # hourly limit, no Retry-After
    "500",
    "stall",  # answers after `stall_s`, past the client's timeout
    "truncate",  # a FlatBuffers body cut in half (well-formed HTTP)
    "short",  # one day fewer than requested
    "shift",  # the requested number of days, starting a day late
    "out-of-range",  # a well-formed answer whose first value no variable can take
    "nan",  # a well-formed answer whose first location has no value at all (NaN everywhere)
    "nan-variable",  # ... whose first location has no value of its first variable on any day
)
# Above every daily variable's physical range (deepsummit/weather/store.py): the store rejects
# the row that carries it, and only that row.
OUT_OF_RANGE_VALUE = 9_999.0
DAILY_LIMIT_REASON = "Daily API request limit exceeded. Please try again tomorrow."


def open_meteo_weight(variables: int, days: int, locations: int) -> float:
    """Open-Meteo's calculateQueryWeight: per location max(1, v/10, v/10 × days/14), summed."""
    fraction = variables / 10
    return locations * max(1.0, max(fraction, fraction * days / 14))


class BadRequest(Exception):
    pass


@dataclass
class Archive:
    """The parquet as one (days × 15) float32 block per peak, indexed by days since 1940."""

    peaks: list[tuple[str, float, float]]
    blocks: dict[str, np.ndarray]

    @classmethod
    def load(cls, data_dir: Path = DATA_DIR) -> Archive:
        frame = pl.read_parquet(data_dir / "weather/era5_daily.parquet")
        positions = pl.read_csv(data_dir / "weather/era5_peaks.csv")
        blocks = {}
        for (peakid,), rows in frame.group_by("peakid"):
            index = (rows["date"] - FIRST_DAY).dt.total_days().to_numpy()
            block = np.full((int(index.max()) + 1, len(VARIABLES)), np.nan, dtype=np.float32)
            block[index] = rows.select(list(VARIABLES)).to_numpy().astype(np.float32)
            blocks[peakid] = block
        peaks = list(positions.select("peakid", "latitude", "longitude").iter_rows())
        return cls(peaks=peaks, blocks=blocks)

    @property
    def last_full_year(self) -> int:
        last = FIRST_DAY + timedelta(days=min(len(b) for b in self.blocks.values()) - 1)
        return last.year if (last.month, last.day) == (12, 31) else last.year - 1

    def stand_in(self, start: date, end: date) -> date:
        """Where the archive holds the days a forecast for start…end stands in for: the same
        days, whole years back, so that `end` falls in the newest full year at the latest."""
        years = max(0, end.year - self.last_full_year)
        return start + (date(end.year - years, 1, 1) - date(end.year, 1, 1))

    def nearest(self, latitude: float, longitude: float) -> str:
        return min(self.peaks, key=lambda p: (p[1] - latitude) ** 2 + (p[2] - longitude) ** 2)[0]

    def values(self, peakid: str, start: date, days: int, variables: list[str]) -> np.ndarray:
        block = self.blocks[peakid]
        columns = [list(VARIABLES).index(name) for name in variables]
        out = np.full((days, len(variables)), np.nan, dtype=np.float32)
        first = (start - FIRST_DAY).days
        available = block[first : first + days][:, columns]
        out[: len(available)] = available
        return out


@dataclass
class Query:
    latitudes: list[float]
    longitudes: list[float]
    elevations: list[float]
    start: date
    end: date
    variables: list[str]
    timezone: str
    format: str

    @property
    def days(self) -> int:
        return (self.end - self.start).days + 1

    @classmethod
    def parse(cls, raw: dict[str, list[str]], forecast: bool = False) -> Query:
        def one(name: str, default: str | None = None) -> str:
            if name not in raw and default is None:
                raise BadRequest(f"Parameter '{name}' is required")
            return raw[name][0] if name in raw else default  # type: ignore[return-value]

        def floats(name: str) -> list[float]:
            return [float(v) for v in one(name, "").split(",") if v]

        latitudes, longitudes = floats("latitude"), floats("longitude")
        if not latitudes or len(latitudes) != len(longitudes):
            raise BadRequest("Parameter 'latitude' and 'longitude' must have the same number")
        timezone = one("timezone", "GMT")
        if forecast:
            past, ahead = int(one("past_days", "0")), int(one("forecast_days", "7"))
            if not 0 <= past <= MAX_PAST_DAYS or not 1 <= ahead <= MAX_FORECAST_DAYS:
                raise BadRequest(
                    f"Parameter 'past_days' must be 0…{MAX_PAST_DAYS} and 'forecast_days' "
                    f"1…{MAX_FORECAST_DAYS}"
                )
            today = datetime.now(ZoneInfo(timezone) if timezone not in ("GMT", "UTC") else None)
            start = today.date() - timedelta(days=past)
            end = today.date() + timedelta(days=ahead - 1)
        else:
            start, end = date.fromisoformat(one("start_date")), date.fromisoformat(one("end_date"))
        if start > end or start < FIRST_DAY:
            raise BadRequest(f"Parameter 'start_date' is out of allowed range from {FIRST_DAY}")
        variables = one("daily").split(",")
        unknown = [v for v in variables if v not in VARIABLES]
        if unknown:
            raise BadRequest(f"Cannot initialize ForecastVariableDaily from '{unknown[0]}'")
        return cls(
            latitudes=latitudes,
            longitudes=longitudes,
            elevations=floats("elevation") or [math.nan] * len(latitudes),
            start=start,
            end=end,
            variables=variables,
            timezone=timezone,
            format=one("format", "json"),
        )

    def utc_offset_s(self) -> int:
        if self.timezone in ("GMT", "UTC"):
            return 0
        noon = datetime.combine(self.start, datetime.min.time()).replace(hour=12)
        offset = noon.replace(tzinfo=ZoneInfo(self.timezone)).utcoffset()
        return int(offset.total_seconds()) if offset else 0


def _flatbuffer(query: Query, index: int, values: np.ndarray, start: date, days: int) -> bytes:
    """One size-prefixed WeatherApiResponse for location `index` (slot numbers of the schema)."""
    builder = flatbuffers.Builder(1024 + values.nbytes)
    offsets = []
    for column, name in enumerate(query.variables):
        variable, unit, altitude, aggregation = VARIABLES[name]
        vector = builder.CreateNumpyVector(np.ascontiguousarray(values[:, column], dtype="<f4"))
        builder.StartObject(13)
        builder.PrependUint8Slot(0, variable, 0)
        builder.PrependUint8Slot(1, unit, 0)
        builder.PrependUOffsetTRelativeSlot(3, vector, 0)
        builder.PrependInt16Slot(5, altitude, 0)
        builder.PrependUint8Slot(6, aggregation, 0)
        offsets.append(builder.EndObject())
    builder.StartVector(4, len(offsets), 4)
    for offset in reversed(offsets):
        builder.PrependUOffsetTRelative(offset)
    variables = builder.EndVector()
    utc_offset = query.utc_offset_s()
    first = (start - date(1970, 1, 1)).days * 86_400 - utc_offset  # local midnight, in UTC
    builder.StartObject(4)
    builder.PrependInt64Slot(0, first, 0)
    builder.PrependInt64Slot(1, first + days * 86_400, 0)
    builder.PrependInt32Slot(2, 86_400, 0)
    builder.PrependUOffsetTRelativeSlot(3, variables, 0)
    daily = builder.EndObject()
    timezone = builder.CreateString(query.timezone)
    builder.StartObject(15)
    builder.PrependFloat32Slot(0, query.latitudes[index], 0.0)
    builder.PrependFloat32Slot(1, query.longitudes[index], 0.0)
    builder.PrependFloat32Slot(2, query.elevations[index], 0.0)
    builder.PrependInt64Slot(4, index, 0)
    builder.PrependUint8Slot(5, Model.era5, 0)
    builder.PrependInt32Slot(6, utc_offset, 0)
    builder.PrependUOffsetTRelativeSlot(7, timezone, 0)
    builder.PrependUOffsetTRelativeSlot(10, daily, 0)
    builder.FinishSizePrefixed(builder.EndObject())
    return bytes(builder.Output())


def _json(query: Query, index: int, values: np.ndarray, start: date, days: int) -> dict[str, Any]:
    dates = [(start + timedelta(days=i)).isoformat() for i in range(days)]
    daily: dict[str, Any] = {"time": dates}
    for column, name in enumerate(query.variables):
        daily[name] = [None if np.isnan(v) else round(float(v), 2) for v in values[:, column]]
    return {
        "latitude": query.latitudes[index],
        "longitude": query.longitudes[index],
        "generationtime_ms": 0.1,
        "utc_offset_seconds": query.utc_offset_s(),
        "timezone": query.timezone,
        "elevation": query.elevations[index],
        "location_id": index,
        "daily_units": {
            "time": "iso8601",
            **{n: UNIT_LABELS.get(VARIABLES[n][1], "") for n in query.variables},
        },
        "daily": daily,
    }


@dataclass
class OpenMeteoServer:
    """Context manager: `with OpenMeteoServer() as server: server.url ...`."""

    archive: Archive = field(default_factory=Archive.load)
    port: int = 0  # 0 = any free port
    daily_limit: float | None = None  # weighted calls per "day" before the daily-limit 429
    retry_after_s: float = 1.0
    stall_s: float = 1.0
    requests: int = 0  # every HTTP request received
    weighted_calls: float = 0.0  # charged for each answered (HTTP 200) request
    log: list[dict[str, Any]] = field(default_factory=list)
    _faults: deque[str] = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def inject(self, *faults: str) -> None:
        unknown = set(faults) - set(FAULTS)
        if unknown:
            raise ValueError(f"unknown faults {unknown}; known: {FAULTS}")
        self._faults.extend(faults)

    def reset_counts(self) -> None:
        """A new day: counters and the daily budget start from zero."""
        with self._lock:
            self.requests, self.weighted_calls = 0, 0.0
            self.log.clear()

    @contextlib.contextmanager
    def one_test(self) -> Iterator[OpenMeteoServer]:
        """One test's use of a shared server: counters from zero and no daily limit; a fault it
        injected but never hit fails it."""
        self.reset_counts()
        self.daily_limit = None
        yield self
        assert not self._faults, f"faults injected but never hit: {list(self._faults)}"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}/v1/archive"

    @property
    def forecast_url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}/v1/forecast"

    def __enter__(self) -> OpenMeteoServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server._handle(self)

            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._http.daemon_threads = True
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.shutdown()
        self._http.server_close()

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        parsed = urlparse(handler.path)
        raw = parse_qs(parsed.query)
        if parsed.path == STATS_PATH:  # not a request of the API: not counted
            with self._lock:
                counts = {"requests": self.requests, "weighted_calls": self.weighted_calls}
            return self._send_json(handler, {}, 200, counts)
        with self._lock:
            self.requests += 1
            fault = self._faults.popleft() if self._faults else None
        entry: dict[str, Any] = {"params": {k: v[0] for k, v in raw.items()}, "fault": fault}
        self.log.append(entry)
        if parsed.path not in PATHS:
            return self._send_json(handler, entry, 404, {"error": True, "reason": "Not Found"})
        forecast = parsed.path == "/v1/forecast"
        try:
            query = Query.parse(raw, forecast)
        except (BadRequest, ValueError) as error:
            return self._send_json(handler, entry, 400, {"error": True, "reason": str(error)})
        weight = open_meteo_weight(len(query.variables), query.days, len(query.latitudes))
        with self._lock:
            over = self.daily_limit is not None and self.weighted_calls + weight > self.daily_limit
        if over:
            return self._send_json(
                handler, entry, 429, {"error": True, "reason": DAILY_LIMIT_REASON}
            )
        if fault == "429":
            reason = "Minutely API request limit exceeded. Please try again in one minute."
            headers = {"Retry-After": f"{self.retry_after_s:g}"}
            return self._send_json(handler, entry, 429, {"error": True, "reason": reason}, headers)
        if fault == "429-no-retry-after":
            reason = "Hourly API request limit exceeded. Please try again in the next hour."
            return self._send_json(handler, entry, 429, {"error": True, "reason": reason})
        if fault == "500":
            return self._send_json(handler, entry, 500, {"error": True, "reason": "Internal"})
        if fault == "stall":
            time.sleep(self.stall_s)
        start, days = query.start, query.days
        if fault == "short":
            days -= 1
        if fault == "shift":
            start += timedelta(days=1)
        with self._lock:
            self.weighted_calls += weight
        stored = self.archive.stand_in(query.start, query.end) if forecast else None
        body = self._body(query, start, days, fault, stored)
        if fault == "truncate":
            body = body[: len(body) // 2]
        content_type = "application/json" if query.format == "json" else "application/octet-stream"
        self._send(handler, entry, 200, body, content_type)

    def _body(
        self,
        query: Query,
        start: date,
        days: int,
        fault: str | None = None,
        stored: date | None = None,
    ) -> bytes:
        """The answer for `days` days from `start`; values from the archive's days from
        `stored` (default: `start` itself), shifted as `start` is from the query's start. A
        value `fault` changes only the first location's values."""
        first = (stored or query.start) + (start - query.start)
        parts = []
        for index, (lat, lon) in enumerate(zip(query.latitudes, query.longitudes, strict=True)):
            values = self.archive.values(
                self.archive.nearest(lat, lon), first, days, query.variables
            )
            parts.append((index, values))
        faulty = parts[0][1]
        if fault == "out-of-range":  # the first day
            faulty[0, 0] = OUT_OF_RANGE_VALUE
        if fault == "nan":
            faulty[:] = np.nan
        if fault == "nan-variable":
            faulty[:, 0] = np.nan
        if query.format == "flatbuffers":
            return b"".join(_flatbuffer(query, i, v, start, days) for i, v in parts)
        documents = [_json(query, i, v, start, days) for i, v in parts]
        return json.dumps(documents[0] if len(documents) == 1 else documents).encode()

    def _send_json(
        self,
        handler: BaseHTTPRequestHandler,
        entry: dict[str, Any],
        status: int,
        document: dict[str, Any],
        headers: dict[str, str] | None = None,
    ) -> None:
        self._send(
            handler, entry, status, json.dumps(document).encode(), "application/json", headers
        )

    def _send(
        self,
        handler: BaseHTTPRequestHandler,
        entry: dict[str, Any],
        status: int,
        body: bytes,
        content_type: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        entry["status"] = status
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", content_type)
            handler.send_header("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                handler.send_header(name, value)
            handler.end_headers()
            handler.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (stall fault)
            entry["status"] = "client gone"


def main() -> None:
    """Serve until interrupted: `python tests/openmeteo_server.py [--port 8089]` (a forecast for
    `deepsummit outlook --forecast-url …` without the internet; --port 0 = any free port). The
    first two lines printed are the archive and forecast URLs; GET /stats returns the counts."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--port", type=int, default=8089)
    args = parser.parse_args()
    with OpenMeteoServer(port=args.port) as server:
        print(f"archive:  {server.url}\nforecast: {server.forecast_url}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
