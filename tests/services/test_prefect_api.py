"""deepsummit/services/prefect_api.py against a real local HTTP server with scripted answers:
which of Prefect's requests ride out a busy server (the idempotent ones, the field updates sent
as PATCH, the reads Prefect takes as POST, a deduplicated create) and which are sent once."""

from __future__ import annotations

import pytest
from scripted_server import Answer, scripted_server

from deepsummit.core.http_retry import RetriesExhausted, RetryPolicy
from deepsummit.services.prefect_api import PrefectApi

FAST = RetryPolicy(attempts=3, wait_initial_s=0.05, wait_max_s=0.1, wait_jitter_s=0.0)
BUSY = Answer(503)
NO_CSRF = Answer(422)  # a server that checks no CSRF tokens: the client asks once, then never


def test_a_delete_rides_out_a_busy_server() -> None:
    """The flake of issue 34: DELETE /flow_runs/{id} answered 503 once under load."""
    with scripted_server(NO_CSRF, BUSY, BUSY, Answer(204)) as server:
        api = PrefectApi(f"{server.url}/api", None, FAST)
        assert api.request("DELETE", "/flow_runs/42") is None
    methods = [(request.method, request.path) for request in server.received]
    assert methods == [("GET", "/api/csrf-token?client=" + api._client_id)] + 3 * [
        ("DELETE", "/api/flow_runs/42")
    ]


@pytest.mark.parametrize("path", ["/flow_runs/filter", "/flow_runs/count", "/logs/paginate"])
def test_a_read_sent_as_post_is_retried(path: str) -> None:
    with scripted_server(NO_CSRF, BUSY, Answer(200, body=[])) as server:
        assert PrefectApi(f"{server.url}/api", None, FAST).post(path, {}) == []
    assert len(server.received) == 3


def test_a_patch_rides_out_a_busy_server() -> None:
    """The flake of stop 46: PATCH /work_pools/gpu answered 503 (SQLite busy) under load."""
    template = {"base_job_template": {"variables": {}}}
    with scripted_server(NO_CSRF, BUSY, Answer(204)) as server:
        api = PrefectApi(f"{server.url}/api", None, FAST)
        assert api.request("PATCH", "/work_pools/gpu", template) is None
    assert [request.method for request in server.received] == ["GET", "PATCH", "PATCH"]


def test_a_create_is_sent_once_unless_the_server_deduplicates_it() -> None:
    create = "/deployments/d1/create_flow_run"
    with scripted_server(NO_CSRF, BUSY, BUSY, Answer(201, body={"id": "r1"})) as server:
        api = PrefectApi(f"{server.url}/api", None, FAST)
        with pytest.raises(RetriesExhausted, match=rf"POST /api{create}: 503 .*not retried"):
            api.post(create, {"name": "once"})
        assert api.post(create, {"idempotency_key": "k1"}) == {"id": "r1"}
    assert [request.method for request in server.received] == ["GET", "POST", "POST", "POST"]


def test_a_server_busy_for_good_names_itself_in_one_line() -> None:
    with scripted_server(BUSY) as server, pytest.raises(RetriesExhausted) as exhausted:
        PrefectApi(f"{server.url}/api", None, FAST).get("/flow_runs/42")
    assert str(exhausted.value).startswith(f"{server.url}: GET /api/flow_runs/42: 503 ")
    assert len(server.received) == FAST.attempts
