"""Alerts end to end: `deepsummit up` with `alerts.webhook_url` pointing at a real HTTP receiver
in this test, a real Prefect server and worker, and a `summit/train` deployment run that fails
(a members file that does not exist): the server's automation posts the run's name and a link
to it. A second `up` keeps one automation; an `up` without the URL removes it."""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from services_fixtures import RunningServices, deepsummit

from deepsummit.core.config import deep_merge, load_settings
from deepsummit.core.sections import PROJECT_ROOT
from deepsummit.core.service_sections import AlertsConfig
from deepsummit.services import alerts, local
from deepsummit.services import supervisor as services

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
pytest_plugins = ["services_fixtures"]

PREFECT = str(Path(sys.executable).parent / "prefect")
WEBHOOK_PATH = "/hooks/T000/secret-token"  # a Slack webhook's path is its secret


class Receiver:
    """An HTTP server on a free port that keeps the JSON body of every POST it receives."""

    def __init__(self) -> None:
        received: queue.Queue[dict[str, Any]] = queue.Queue()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.put({"path": self.path, "json": json.loads(body)})
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:  # keep the test output quiet
                pass

        self.received = received
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}{WEBHOOK_PATH}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def next_message(self, timeout_s: float) -> dict[str, Any]:
        try:
            return self.received.get(timeout=timeout_s)
        except queue.Empty:
            raise AssertionError(f"no notification reached the receiver in {timeout_s} s") from None


def test_a_webhook_url_that_is_no_url_is_refused_with_the_settings() -> None:
    with pytest.raises(ValidationError, match="webhook_url is not an http\\(s\\) URL"):
        load_settings(overrides={"alerts": {"webhook_url": "hooks.slack.com/T0/B0/x"}})
    url = "https://hooks.slack.com/services/T0/B0/x"
    assert load_settings(overrides={"alerts": {"webhook_url": url}}).alerts.webhook_url == url


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    yield receiver
    receiver.server.shutdown()


@pytest.fixture(scope="module")
def stack(services_stack: RunningServices, receiver: Receiver) -> Iterator[RunningServices]:
    """The session's services, with `alerts.webhook_url` pointing at the receiver applied by
    `up`; the alerts are taken off again afterwards (an `up` without the URL)."""
    overrides = deep_merge(services_stack.overrides, {"alerts": {"webhook_url": receiver.url}})
    settings = load_settings("tiny", overrides)
    yield RunningServices(settings, overrides, services.up(settings))
    services.up(services_stack.settings)


def _automations(stack: RunningServices) -> list[dict[str, Any]]:
    body = {"automations": {"name": {"any_": [alerts.AUTOMATION_NAME]}}}
    return services.prefect_api(stack.settings).post("/automations/filter", body)


def _blocks(stack: RunningServices) -> list[dict[str, Any]]:
    body = {"block_documents": {"name": {"any_": [alerts.BLOCK_NAME]}}}
    return services.prefect_api(stack.settings).post("/block_documents/filter", body)


def test_a_failed_deployment_run_posts_its_name_and_link(
    stack: RunningServices, receiver: Receiver, tmp_path: Path
) -> None:
    assert stack.up_lines[-1].startswith("alerts: Failed/Crashed runs of summit, summit-trial")
    missing = tmp_path / "absent-members.csv"
    result = subprocess.run(
        [PREFECT, "deployment", "run", "summit/train", "--param", "profile=tiny",
         "--param", "options=" + json.dumps({"members": str(missing)})],
        env={**os.environ, **services.worker_env(stack.settings)},
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    flow_run_id = re.search(r"UUID: ([0-9a-f-]{36})", result.stdout).group(1)

    message = receiver.next_message(timeout_s=240)
    run = services.prefect_api(stack.settings).get(f"/flow_runs/{flow_run_id}")
    assert run["state_type"] == "FAILED"
    assert message["path"] == WEBHOOK_PATH
    text = message["json"]["text"]
    assert f"summit run {run['name']} Failed" in text
    assert str(missing) in text  # the reason, from the run's state message
    assert f"{local.prefect_ui_url(stack.settings)}/runs/flow-run/{flow_run_id}" in text
    assert receiver.received.empty()  # one failure, one notification


def test_up_keeps_one_automation_and_removes_it_without_a_url(stack: RunningServices) -> None:
    services.up(stack.settings)  # the same URL again: updated in place
    (automation,) = _automations(stack)
    assert automation["enabled"]
    (block,) = _blocks(stack)
    assert automation["actions"][0]["block_document_id"] == block["id"]
    status = deepsummit(stack.overrides, "status")
    assert "alerts           on: Failed/Crashed runs of summit, summit-trial" in status.stdout
    assert WEBHOOK_PATH not in status.stdout  # the webhook's secret path is never printed

    off = stack.settings.model_copy(update={"alerts": AlertsConfig()})
    assert services.up(off)[-1].endswith(f"; removed the automation {alerts.AUTOMATION_NAME}")
    assert _automations(stack) == [] and _blocks(stack) == []
    without_url = {k: v for k, v in stack.overrides.items() if k != "alerts"}
    status = deepsummit(without_url, "status")
    assert "alerts           off: set alerts.webhook_url" in status.stdout
    assert services.up(off)[-1] == "alerts: off (no alerts.webhook_url)"
