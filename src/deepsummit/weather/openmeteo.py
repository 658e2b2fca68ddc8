"""The Open-Meteo historical archive as a weather source, through `openmeteo-requests`.

Transport: `openmeteo_requests.Client(session=retry(CachedSession(...)))`. urllib3 retries
connection errors, read timeouts (a stalled server) and HTTP 500/502/503/504 with exponential
backoff. HTTP 429 is handled here instead, because the client keeps only a 429's body: a
session hook reads `Retry-After` and the reason first. A daily-limit 429 stops the run
(QuotaExhausted); any other 429 waits for Retry-After (or backoff) and tries again.

A response is stored only if it answers the request: one message per location, the requested
days from start to end in the local calendar, every variable with one value per day. A
response that does not is rejected, evicted from the cache, and reported; its request's days
stay missing, so the next run asks again. A location whose answer has no value at all, or no
value on any day for a variable the source must give, is rejected the same way, on its own:
its rows are not stored (NULL rows would count as days stored and never be asked for again),
the report names its days and variables, and the response is evicted. A response that is
stored but has rows the store quarantines (a value out of range) is evicted too, so the next
run asks the API again instead of reading the same bad value from the cache forever.

The warehouse is opened only to store an answer (and record the calls it cost), one short
transaction per request, never while a request, a retry or a rate-limit wait is under way:
another stage waiting for the write lock gets it between two requests.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

import duckdb
import numpy as np
import polars as pl
import requests
import requests_cache
from openmeteo_requests import Client, OpenMeteoRequestsError
from openmeteo_sdk.WeatherApiResponse import WeatherApiResponse
from retry_requests import retry

from deepsummit.core.context import Progress, no_progress
from deepsummit.core.errors import QuotaExhausted
from deepsummit.core.weather_sections import WeatherConfig
from deepsummit.weather import ledger
from deepsummit.weather.cost import DAY_S, RateLimiter
from deepsummit.weather.plan import PlannedRequest
from deepsummit.weather.store import StoreResult, store_batch

SOURCE = "open-meteo"
RETRIED_STATUSES = (500, 502, 503, 504)
# A dropped connection, a timeout urllib3 gave up on, or a body cut off mid-way: worth
# another try here (a RetryError means urllib3 already retried an HTTP 5xx: not transient).
TRANSIENT_ERRORS = (
    requests.ConnectionError,
    requests.Timeout,
    requests.exceptions.ChunkedEncodingError,
)


class Refusal(Exception):
    """HTTP 429 from the API: its reason text and Retry-After (seconds) when given."""

    def __init__(self, reason: str, retry_after: float | None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after

    @property
    def daily(self) -> bool:
        return "daily" in self.reason.lower()


class ResponseRejected(Exception):
    """A response that does not answer its request; never stored."""


# Opens a write connection to the warehouse for one short transaction (a bound
# deepsummit.core.warehouse.connect).
OpenWarehouse = Callable[[], AbstractContextManager[duckdb.DuckDBPyConnection]]


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:  # an HTTP date; backoff is good enough
        return None


class ResponseWatch:
    """Session response hook: raises Refusal on 429 (the client would drop Retry-After) and
    remembers the last response's cache key and whether it came from the cache."""

    def __init__(self) -> None:
        self.cache_key: str | None = None
        self.from_cache = False
        self.created_at: datetime | None = None  # when the API answered (cached or not)

    def __call__(self, response: requests.Response, *args: Any, **kwargs: Any) -> Any:
        if response.status_code == 429:
            try:
                reason = str(response.json().get("reason", response.text))
            except ValueError:
                reason = response.text or "HTTP 429"
            raise Refusal(reason, _retry_after(response.headers.get("Retry-After")))
        self.cache_key = getattr(response, "cache_key", None)
        self.from_cache = bool(getattr(response, "from_cache", False))
        self.created_at = getattr(response, "created_at", None)
        return response


@dataclass
class OpenMeteoSource:
    """One client, its cached session and a rate limiter, for one run."""

    config: WeatherConfig
    limiter: RateLimiter
    sleep: Callable[[float], None] = time.sleep
    watch: ResponseWatch = field(default_factory=ResponseWatch)
    tries: int = 0
    # History never changes: cached for good (-1). A forecast does: cached for a while.
    expire_after_s: int = -1

    def __post_init__(self) -> None:
        self.config.cache_path.parent.mkdir(parents=True, exist_ok=True)
        cached = requests_cache.CachedSession(
            str(self.config.cache_path), expire_after=self.expire_after_s, allowable_codes=(200,)
        )
        self.session = retry(
            cached,
            retries=self.config.retries,
            backoff_factor=self.config.backoff_factor,
            status_to_retry=RETRIED_STATUSES,
            backoff_max=self.config.backoff_max_s,
            # 429s are ours (urllib3 would sleep any Retry-After, even a daily limit's)
            respect_retry_after_header=False,
        )
        self.session.hooks["response"].append(self.watch)
        self.client = Client(session=self.session)

    def _backoff(self, attempt: int) -> float:
        return min(self.config.backoff_max_s, self.config.backoff_factor * 2**attempt)

    def fetch(self, request: PlannedRequest) -> list[WeatherApiResponse]:
        """The API's answer to `request`, after waiting out rate limits and transient faults.

        Raises QuotaExhausted on the daily limit, ResponseRejected when every try failed.
        `self.tries` counts the HTTP requests this sent (urllib3's own retries not included)."""
        params = request.params(self.config)
        last_error = ""
        self.tries = 0
        for attempt in range(self.config.retries + 1):
            self.limiter.acquire(request.weight)
            self.tries += 1
            try:
                responses = self.client.weather_api(
                    self.config.api_url, params=params, timeout=self.config.timeout_s
                )
            except OpenMeteoRequestsError as error:
                cause = error.__cause__
                if isinstance(cause, Refusal) and cause.daily:
                    reason = cause.reason.rstrip(".")
                    raise QuotaExhausted(f"Open-Meteo refused: {reason}") from error
                if isinstance(cause, Refusal):
                    wait, last_error = cause.retry_after, f"HTTP 429 {cause.reason}"
                elif isinstance(cause, TRANSIENT_ERRORS):
                    wait, last_error = None, f"{type(cause).__name__}: {cause}"
                else:  # HTTP 5xx after urllib3's retries, 400, or an unparseable body
                    raise ResponseRejected(str(error)) from error
                self.sleep(min(self.config.backoff_max_s, wait or self._backoff(attempt)))
                continue
            if self.watch.from_cache:
                self.tries -= 1
                self.limiter.refund_last()
            return responses
        raise ResponseRejected(f"gave up after {self.tries} tries: {last_error}")

    def source_name(self) -> str:
        """The weather_daily source of what this answered."""
        return SOURCE

    def evict(self) -> None:
        """Drop the last response from the cache (it was rejected, or some of its rows were;
        the next run asks again)."""
        if self.watch.cache_key:
            self.session.cache.delete(self.watch.cache_key)


def _local_dates(daily: Any, utc_offset_s: int) -> list[date]:
    start, end, step = daily.Time(), daily.TimeEnd(), daily.Interval()
    if step != 86_400:
        raise ResponseRejected(f"daily interval is {step} s, not one day")
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    return [(epoch + timedelta(seconds=t + utc_offset_s)).date() for t in range(start, end, step)]


def response_frame(responses: list[WeatherApiResponse], request: PlannedRequest) -> pl.DataFrame:
    """The daily rows of all locations of `request` (peakid, date, 15 variables), or
    ResponseRejected when the answer does not match what was asked."""
    if len(responses) != len(request.locations):
        raise ResponseRejected(
            f"{len(responses)} locations in the response, {len(request.locations)} requested"
        )
    expected = [request.start + timedelta(days=i) for i in range(request.days)]
    frames = []
    for index, response in enumerate(responses):
        try:
            location = request.locations[response.LocationId()]
            daily = response.Daily()
            if daily is None or daily.VariablesLength() != len(request.variables):
                raise ResponseRejected(f"location {index}: daily variables missing")
            dates = _local_dates(daily, response.UtcOffsetSeconds())
            columns = {
                name: daily.Variables(i).ValuesAsNumpy().astype(np.float64)
                for i, name in enumerate(request.variables)
            }
        except (IndexError, ValueError, TypeError, AttributeError, struct.error) as error:
            raise ResponseRejected(f"location {index}: malformed FlatBuffers ({error})") from error
        if dates != expected:
            got = f"{dates[0]}..{dates[-1]} ({len(dates)} days)" if dates else "no days"
            raise ResponseRejected(
                f"{location.peakid}: dates {got}, requested {request.start}..{request.end} "
                f"({request.days} days)"
            )
        lengths = {name: len(values) for name, values in columns.items()}
        if set(lengths.values()) != {len(dates)}:
            raise ResponseRejected(
                f"{location.peakid}: value counts {lengths} for {len(dates)} days"
            )
        frames.append(
            pl.DataFrame({"peakid": location.peakid, "date": dates, **columns}).with_columns(
                pl.col("peakid").cast(pl.String)
            )
        )
    return pl.concat(frames)


def without_values(
    frame: pl.DataFrame, variables: tuple[str, ...], config: WeatherConfig
) -> dict[str, str]:
    """Each peak of an answer (`frame`, as response_frame gives it) that has no value at all,
    or no value on any day for one of `variables` not in `config.optional_variables`, and why.
    ERA5's first day has only its analysis fields (data README §4), so it cannot show that a
    variable is missing: the per-variable test leaves `config.first_date` out."""
    required = [name for name in variables if name not in config.optional_variables]
    judged = pl.col("date") > config.first_date
    summary = frame.group_by("peakid", maintain_order=True).agg(
        pl.any_horizontal(pl.col(variables).fill_nan(None).is_not_null()).any().alias("_any"),
        judged.any().alias("_judged"),
        *(pl.col(name).fill_nan(None).filter(judged).is_not_null().any() for name in required),
    )
    reasons = {}
    for row in summary.iter_rows(named=True):
        empty = [name for name in required if not row[name]]
        if not row["_any"]:
            reasons[row["peakid"]] = "no value at all (every variable NaN on every day)"
        elif row["_judged"] and empty:
            reasons[row["peakid"]] = f"no value on any day for {', '.join(empty)}"
    return reasons


@dataclass
class FetchOutcome:
    """What a run of requests did, per peak and in total. Rows of the answers: `fetched` =
    `stored` + `quarantined` + `rejected_rows`."""

    requests: dict[str, int] = field(default_factory=dict)
    weighted_calls: dict[str, float] = field(default_factory=dict)
    fetched: int = 0
    stored: int = 0
    quarantined: int = 0
    rejected_rows: int = 0  # rows of locations answered without values (never stored)
    rejected: list[str] = field(default_factory=list)  # one line per rejected response or location
    stopped: str | None = None

    def count(self, request: PlannedRequest, tries: int) -> None:
        """Charge each location of `request` its share of `tries` HTTP requests."""
        for location in request.locations:
            self.requests[location.peakid] = self.requests.get(location.peakid, 0) + tries
            self.weighted_calls[location.peakid] = (
                self.weighted_calls.get(location.peakid, 0.0) + tries * request.weight_per_location
            )

    def add(self, result: StoreResult) -> None:
        self.stored += result.stored
        self.quarantined += result.quarantined


def fetch_requests(
    open_warehouse: OpenWarehouse,
    source: OpenMeteoSource,
    plan: list[PlannedRequest],
    progress: Progress = no_progress,
) -> FetchOutcome:
    """Fetch and store each planned request in turn; stop cleanly at the daily limit, keeping
    everything stored so far. The warehouse is opened after each answer, for its own
    transaction, and closed before the next request. `progress` counts requests done of
    planned, and the weighted calls spent of today's budget."""
    outcome = FetchOutcome()
    config = source.config
    budget = config.limits.per_day
    for done, request in enumerate(plan, start=1):
        request_id = request.request_id(config)
        frame: pl.DataFrame | None = None
        try:
            frame = response_frame(source.fetch(request), request)
        except QuotaExhausted as error:
            outcome.stopped = str(error)
        except ResponseRejected as error:
            source.evict()
            outcome.rejected.append(f"{request_id} ({request.start}..{request.end}): {error}")
        finally:
            outcome.count(request, source.tries)
            _store(open_warehouse, source, request, request_id, frame, outcome)
        spent = source.limiter.used(DAY_S)
        progress(done, len(plan), f"{spent:,.1f} of {budget:,g} weighted calls used today")
        if outcome.stopped:
            break
    return outcome


def _store(
    open_warehouse: OpenWarehouse,
    source: OpenMeteoSource,
    request: PlannedRequest,
    request_id: str,
    frame: pl.DataFrame | None,
    outcome: FetchOutcome,
) -> None:
    """Record what `request` cost and store its rows (`frame`, None when there is no answer
    to store), except those of a location without values (without_values: rejected); evict the
    response when any of its rows is rejected or quarantined."""
    if not source.tries and frame is None:
        return  # nothing was sent and nothing came back
    config = source.config
    with open_warehouse() as con:
        if source.tries:
            spent = source.tries * request.weight
            ledger.record_calls(con, config.api_url, source.limiter.clock(), spent, request_id)
        if frame is None:
            return
        batch = frame.with_row_index("row_number", offset=1).with_columns(
            pl.col("row_number").cast(pl.Int64),
            pl.lit(source.source_name()).alias("source"),
            pl.lit(datetime.now(UTC).replace(tzinfo=None))
            .cast(pl.Datetime("us"))
            .alias("fetched_at"),
            pl.lit(request_id).alias("request_id"),
            pl.lit(config.api_url).alias("origin"),
        )
        empty = without_values(frame, request.variables, config)
        result = store_batch(con, batch.filter(~pl.col("peakid").is_in(list(empty))))
    outcome.fetched += frame.height
    outcome.add(result)
    for peakid, why in empty.items():
        outcome.rejected_rows += request.days
        outcome.rejected.append(
            f"{peakid} {request.start}..{request.end} ({request.days} days) of {request_id}: "
            f"{why}; not stored, asked again next run"
        )
    if result.quarantined or empty:
        source.evict()
