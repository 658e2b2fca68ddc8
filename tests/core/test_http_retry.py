"""deepsummit/core/http_retry.py against a real local HTTP server with scripted answers: a busy
server's transient answers are ridden out with backoff (and the wait it asks for), the rest is
passed on at once, and a server that stays busy ends in one line naming it and its answer."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from email.message import Message
from email.utils import format_datetime

import pytest
from scripted_server import RESET, Answer, scripted_server

from deepsummit.core.errors import PipelineError
from deepsummit.core.http_retry import RetriesExhausted, RetryPolicy, retry_after_s, send

# Short waits, no jitter: the backoff's lower bounds below are exact.
FAST = RetryPolicy(
    attempts=4, wait_initial_s=0.1, wait_max_s=0.4, wait_jitter_s=0.0, retry_after_max_s=5
)
BUSY = Answer(503)
OK = Answer(200, body={"ok": True})


def get(url: str, retry: RetryPolicy = FAST) -> tuple[int, bytes]:
    return send(urllib.request.Request(url), 10, retry=retry)


def test_a_server_busy_twice_is_answered_the_third_time_after_a_growing_backoff() -> None:
    with scripted_server(BUSY, BUSY, OK) as server:
        status, body = get(f"{server.url}/health")
    assert (status, body) == (200, b'{"ok": true}')
    assert len(server.received) == 3
    first, second = server.gaps()
    assert first >= 0.1 and second >= 0.2  # 0.1 s, then doubled


@pytest.mark.parametrize("status", [429, 502, 503, 504])
def test_each_transient_status_is_retried(status: int) -> None:
    with scripted_server(Answer(status), OK) as server:
        assert get(server.url)[0] == 200
    assert len(server.received) == 2


def test_a_server_busy_for_good_ends_in_one_line_naming_it_and_its_answer() -> None:
    with scripted_server(BUSY) as server, pytest.raises(RetriesExhausted) as exhausted:
        get(f"{server.url}/api/flow_runs/42?secret=x")
    assert len(server.received) == FAST.attempts
    line = str(exhausted.value)
    assert "\n" not in line
    assert line.startswith(f"{server.url}: GET /api/flow_runs/42: 503 Service Unavailable, ")
    assert f"{FAST.attempts} attempts" in line and "secret" not in line
    assert exhausted.value.status == 503
    # A pipeline error (the CLI prints its line) and a URLError (health checks read it as down).
    assert isinstance(exhausted.value, PipelineError)
    assert isinstance(exhausted.value, urllib.error.URLError)


def test_retry_after_is_waited_for() -> None:
    with scripted_server(Answer(503, {"Retry-After": "1"}), OK) as server:
        assert get(server.url)[0] == 200
    (gap,) = server.gaps()
    assert gap >= 1.0  # not the policy's 0.1 s


def test_a_retry_after_longer_than_the_policy_waits_is_not_waited_for() -> None:
    asked = "429 Too Many Requests, asked to wait 3600 s"
    with (
        scripted_server(Answer(429, {"Retry-After": "3600"}), OK) as server,
        pytest.raises(RetriesExhausted, match=asked),
    ):
        get(server.url)
    assert len(server.received) == 1


def test_a_reset_connection_is_retried() -> None:
    with scripted_server(RESET, OK) as server:
        assert get(server.url)[0] == 200
    assert len(server.received) == 2


def test_a_connection_reset_for_good_ends_in_one_line() -> None:
    with scripted_server(RESET) as server:
        gave_up = (
            rf"^{server.url}: GET /: connection reset, {FAST.attempts} attempts in .*; gave up$"
        )
        with pytest.raises(RetriesExhausted, match=gave_up):
            get(server.url)
    assert len(server.received) == FAST.attempts


def test_a_request_that_may_not_be_repeated_is_sent_once() -> None:
    with scripted_server(BUSY, OK) as server:
        request = urllib.request.Request(f"{server.url}/runs", data=b"{}", method="POST")
        with pytest.raises(RetriesExhausted, match=r"503 .*not retried"):
            send(request, 10, retry=FAST)
        assert len(server.received) == 1
        # The caller knows this POST is a read, or deduplicated: then it is retried.
        assert send(request, 10, idempotent=True, retry=FAST)[0] == 200


def test_a_refusal_that_is_no_transient_answer_is_passed_on_at_once() -> None:
    with (
        scripted_server(Answer(404), OK) as server,
        pytest.raises(urllib.error.HTTPError) as refused,
    ):
        get(server.url)
    assert refused.value.code == 404 and not isinstance(refused.value, RetriesExhausted)
    assert len(server.received) == 1


def test_a_port_nothing_listens_on_is_not_waited_for() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, never listening: connections are refused
        with pytest.raises(urllib.error.URLError) as refused:
            get(f"http://127.0.0.1:{port}/", RetryPolicy(wait_initial_s=30))
    assert isinstance(refused.value.reason, ConnectionRefusedError)


def _headers(**values: str) -> Message:
    message = Message()
    for name, value in values.items():
        message[name.replace("_", "-")] = value
    return message


def test_retry_after_reads_seconds_and_dates() -> None:
    assert retry_after_s(_headers(Retry_After="7")) == 7.0
    in_a_minute = format_datetime(datetime.now(UTC) + timedelta(seconds=60), usegmt=True)
    assert 55 <= retry_after_s(_headers(Retry_After=in_a_minute)) <= 60
    past = format_datetime(datetime(2000, 1, 1, tzinfo=UTC), usegmt=True)
    assert retry_after_s(_headers(Retry_After=past)) == 0.0
    assert retry_after_s(_headers(Retry_After="soon")) is None
    assert retry_after_s(_headers()) is None
