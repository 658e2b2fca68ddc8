"""HTTP requests over urllib that ride out a busy server: the project's own light clients (the
Prefect REST API, health checks) send through `send`.

A server under load answers 429, 502, 503 or 504 now and then, or resets the connection; such an
answer is retried with bounded exponential backoff (stamina: jitter, a number of attempts and a
time bound), waiting what a `Retry-After` header asks when it asks for no more than
`RetryPolicy.retry_after_max_s`. Only a request that may be repeated is retried: an idempotent
method, or one the caller declares idempotent or deduplicated (a read sent as POST, a body with
an idempotency key). A DELETE repeated after an answer that was lost may find nothing left: it
says 404, as for anything gone. When the attempts run out, RetriesExhausted says so in one line
naming the server and its last answer. A refused connection is not retried: nothing listens,
which a wait of a few seconds does not mend (callers that wait for a server to start poll with a
deadline).
"""

from __future__ import annotations

import email.utils
import http.client
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import Message
from http import HTTPStatus
from urllib.parse import urlsplit

import stamina

from deepsummit.core.errors import ServiceUnavailable

RETRIED_STATUSES = frozenset(
    {
        HTTPStatus.TOO_MANY_REQUESTS,
        HTTPStatus.BAD_GATEWAY,
        HTTPStatus.SERVICE_UNAVAILABLE,
        HTTPStatus.GATEWAY_TIMEOUT,
    }
)
# RFC 9110 §9.2.2: repeating one of these has the effect of sending it once.
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})


@dataclass(frozen=True)
class RetryPolicy:
    """How long a request rides out transient answers: `attempts` in all (the first included),
    the backoff between them (`wait_initial_s` doubled each time up to `wait_max_s`, plus up to
    `wait_jitter_s` at random), `timeout_s` for the whole request, and the longest Retry-After
    waited for (a server asking for longer is not waited on)."""

    attempts: int = 6  # five retries, as Prefect's own client makes
    wait_initial_s: float = 0.5
    wait_max_s: float = 8.0
    wait_jitter_s: float = 0.5
    timeout_s: float = 45.0
    retry_after_max_s: float = 30.0


DEFAULT_RETRY = RetryPolicy()


class RetriesExhausted(ServiceUnavailable, urllib.error.URLError):
    """A server kept answering a transient refusal, or resetting the connection, until the
    attempts ran out (or the request was not one to repeat); `str()` is one line naming the
    server and its last answer. A URLError, so the callers that treat an unreachable server as
    down (health checks) treat this one so too."""

    def __init__(self, line: str, status: int | None) -> None:
        urllib.error.URLError.__init__(self, line)
        self.line = line
        self.status = status  # the last answer's status; None for a reset connection

    def __str__(self) -> str:
        return self.line


class _TransientAnswer(Exception):
    """One attempt's transient failure: its status (None for a reset), how the server put it,
    and the wait it asked for (None: none asked)."""

    def __init__(self, status: int | None, reason: str, retry_after_s: float | None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.retry_after_s = retry_after_s


def send(
    request: urllib.request.Request,
    timeout_s: float,
    *,
    idempotent: bool | None = None,
    retry: RetryPolicy = DEFAULT_RETRY,
) -> tuple[int, bytes]:
    """(status, body) of `request`'s answer, transient answers retried while `idempotent` (by
    default: while its method is); urllib.error.HTTPError for any other refusal,
    RetriesExhausted when the transient ones did not stop, URLError/OSError when nothing
    answers at all. `timeout_s` bounds each attempt, `retry.timeout_s` all of them."""
    repeatable = request.get_method() in IDEMPOTENT_METHODS if idempotent is None else idempotent
    started = time.monotonic()
    attempts = 0
    try:
        for attempt in stamina.retry_context(
            on=lambda error: _backoff(error, retry),
            attempts=retry.attempts if repeatable else 1,
            timeout=retry.timeout_s,
            wait_initial=retry.wait_initial_s,
            wait_max=retry.wait_max_s,
            wait_jitter=retry.wait_jitter_s,
        ):
            with attempt:
                attempts = attempt.num
                return _attempt(request, timeout_s)
    except _TransientAnswer as failure:
        line = _exhausted_line(request, failure, repeatable, attempts, started, retry)
        raise RetriesExhausted(line, failure.status) from failure
    raise AssertionError("unreachable: stamina re-raises the last failure")


def _attempt(request: urllib.request.Request, timeout_s: float) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        if error.code not in RETRIED_STATUSES:
            raise
        raise _TransientAnswer(
            error.code, f"{error.code} {error.reason}", retry_after_s(error.headers)
        ) from error
    except urllib.error.URLError as error:  # urllib wraps what fails while the request is sent
        if not isinstance(error.reason, ConnectionResetError):
            raise
        raise _TransientAnswer(None, "connection reset", None) from error
    except ConnectionResetError as error:  # and not what fails while the answer is read
        # (http.client.RemoteDisconnected, a server closing without a word, is one too)
        closed = isinstance(error, http.client.RemoteDisconnected)
        reason = "closed the connection without an answer" if closed else "connection reset"
        raise _TransientAnswer(None, reason, None) from error


def _backoff(error: Exception, retry: RetryPolicy) -> bool | float:
    """stamina's backoff hook: retry a transient answer, after the wait it asked for if any."""
    if not isinstance(error, _TransientAnswer):
        return False
    if error.retry_after_s is None:
        return True
    return error.retry_after_s if error.retry_after_s <= retry.retry_after_max_s else False


def retry_after_s(headers: Message | None) -> float | None:
    """The wait a Retry-After header asks for, in seconds (delay-seconds or an HTTP date);
    None without a header that makes sense."""
    value = headers.get("Retry-After") if headers is not None else None
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # an HTTP date is GMT; a malformed one may lack the zone
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def server_of(url: str) -> str:
    """scheme://host:port of `url` (no credentials, path or query: a webhook's path is secret)."""
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname}{port}"


def _exhausted_line(
    request: urllib.request.Request,
    failure: _TransientAnswer,
    repeatable: bool,
    attempts: int,
    started: float,
    retry: RetryPolicy,
) -> str:
    """The one line of RetriesExhausted: the server, the request, its last answer, and why it
    was not tried again."""
    path = urlsplit(request.full_url).path or "/"
    line = f"{server_of(request.full_url)}: {request.get_method()} {path}: {failure.reason}"
    if not repeatable:
        return f"{line} (not retried: the request may not be repeated)"
    if failure.retry_after_s is not None and failure.retry_after_s > retry.retry_after_max_s:
        return f"{line}, asked to wait {failure.retry_after_s:.0f} s (more than we wait)"
    return f"{line}, {attempts} attempts in {time.monotonic() - started:.0f} s; gave up"
