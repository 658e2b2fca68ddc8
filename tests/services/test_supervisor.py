"""deepsummit/services/supervisor.py with real processes: process management, the Prefect server's
secret, and what the running servers refuse (requests without the secret, cross-origin requests,
foreign Host names, flow runs choosing their own command or environment).

Prefect's and MLflow's default ports are held by listeners of this module throughout, as a
`make train` left running would hold them: nothing here may need them.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import sys
import time
import urllib.error
import urllib.request
import uuid
from base64 import b64encode
from collections.abc import Callable, Iterator
from email.message import Message
from pathlib import Path

import pytest
from services_fixtures import RunningServices, deepsummit, exited, free_port

from deepsummit.core.config import Settings, load_settings
from deepsummit.services import local, processes
from deepsummit.services import supervisor as services
from deepsummit.services.health import wait_healthy
from deepsummit.services.prefect_api import PrefectApi

pytest_plugins = ["services_fixtures"]

DEFAULT_PORTS = (4200, 5000)
EVIL_ORIGIN = "http://evil.example"

# Ignores SIGTERM (like a worker busy shutting down would) and starts two children: one in its
# process group, one in a session of its own (as a Prefect worker starts a flow run); writes
# their PIDs, then waits.
STUBBORN = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
sleep = [sys.executable, "-c", "import time; time.sleep(600)"]
children = [subprocess.Popen(sleep), subprocess.Popen(sleep, start_new_session=True)]
open(sys.argv[1], "w").write(" ".join(str(c.pid) for c in children))
time.sleep(600)
"""


@pytest.fixture(scope="module", autouse=True)
def default_ports_held() -> Iterator[None]:
    """Listeners on 127.0.0.1:4200 and :5000 (a port already taken is held by someone else).
    SO_REUSEADDR: the closed connections of a `make train` stack stopped just before (TIME_WAIT
    for a minute) do not hold the port; only a listener does."""
    held = []
    for port in DEFAULT_PORTS:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind(("127.0.0.1", port))
        except OSError:
            listener.close()
            continue
        listener.listen()
        held.append(listener)
    yield
    for listener in held:
        listener.close()


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    services_overrides = {
        "run_dir": str(tmp_path / "services"),
        "prefect_port": free_port(),
        "mlflow_port": free_port(),
    }
    return load_settings(overrides={"services": services_overrides})


def test_the_default_ports_are_taken_while_these_tests_run() -> None:
    assert all(services.port_in_use("127.0.0.1", port) for port in DEFAULT_PORTS)


def _wait_until(condition: Callable[[], object], what: str, timeout_s: float = 60) -> None:
    """Poll `condition` until it holds; fail naming `what` after `timeout_s` (a busy machine
    takes seconds, not milliseconds, to start a Python child)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not after {timeout_s:.0f} s")
        time.sleep(0.05)


def _wait_for(path: Path) -> list[int]:
    _wait_until(lambda: path.exists() and path.read_text(), f"{path} written")
    return [int(pid) for pid in path.read_text().split()]


def _wait_exited(pid: int) -> None:
    """Until our child `pid` has exited (and is reaped)."""

    def reaped() -> bool:
        processes.reap(pid)
        return exited(pid)

    _wait_until(reaped, f"pid {pid} exited")


def test_stop_escalates_to_sigkill_and_takes_every_descendant(settings: Settings, tmp_path):
    child_file = tmp_path / "child.pid"
    pid = services.start_process(
        settings, services.WORKER, [sys.executable, "-c", STUBBORN, str(child_file)]
    )
    in_group, own_session = _wait_for(child_file)
    assert services.recorded_pid(settings, services.WORKER) == pid
    assert os.getpgid(in_group) == pid  # setsid: the service leads its own process group
    assert os.getpgid(own_session) == own_session

    started = time.monotonic()
    assert services.stop_process(settings, services.WORKER, grace_s=1.0) == processes.STOPPED
    assert time.monotonic() - started < 8
    assert exited(pid) and exited(in_group) and exited(own_session)
    assert services.recorded_pid(settings, services.WORKER) is None
    assert services.stop_process(settings, services.WORKER) == processes.NOT_RUNNING  # nothing left


# Serves HTTP from a child in its own session and process group, as MLflow's uvicorn worker
# does; writes the child's PID, then waits.
SERVER_WITH_WORKER = """
import subprocess, sys, time
serve = [sys.executable, "-m", "http.server", sys.argv[2], "--bind", "127.0.0.1"]
child = subprocess.Popen(serve, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
open(sys.argv[1], "w").write(str(child.pid))
time.sleep(600)
"""


def test_a_server_whose_main_process_was_killed_is_reported_stopped_and_restartable(
    settings: Settings, tmp_path: Path
):
    """An OOM kill of MLflow's main process leaves its worker serving: status says so, down
    stops what is left, and up clears it before it starts the service again."""
    port = settings.services.mlflow_port
    child_file = tmp_path / "child.pid"
    command = [sys.executable, "-c", SERVER_WITH_WORKER, str(child_file), str(port)]
    leader = services.start_process(settings, services.MLFLOW_SERVER, command)
    (worker,) = _wait_for(child_file)
    _wait_until(lambda: services.port_in_use("127.0.0.1", port), f"port {port} listening")
    os.kill(leader, signal.SIGKILL)
    _wait_exited(leader)

    assert services.leftovers(settings, services.MLFLOW_SERVER) != []
    (mlflow,) = [s for s in services.status(settings) if s.name == services.MLFLOW_SERVER]
    assert not mlflow.running and mlflow.leftover == (worker,)
    assert f"main process DIED; pid {worker} of its group still running" in mlflow.render()

    lines = services.down(settings)
    assert (
        f"{services.MLFLOW_SERVER}: stopped what its dead main process left running "
        f"(pid {worker})" in lines
    )
    assert exited(worker) and not services.port_in_use("127.0.0.1", port)
    assert services.down(settings)[0].endswith(processes.NOT_RUNNING)


def test_up_clears_what_a_dead_main_process_left_before_it_checks_the_ports(
    settings: Settings, tmp_path: Path
):
    port = settings.services.mlflow_port
    child_file = tmp_path / "child.pid"
    command = [sys.executable, "-c", SERVER_WITH_WORKER, str(child_file), str(port)]
    leader = services.start_process(settings, services.MLFLOW_SERVER, command)
    (worker,) = _wait_for(child_file)
    os.kill(leader, signal.SIGKILL)
    _wait_exited(leader)
    # A stranger on the Prefect port makes `up` stop right after the clean-up.
    with socket.socket() as stranger:
        stranger.bind(("127.0.0.1", settings.services.prefect_port))
        stranger.listen()
        with pytest.raises(services.ServiceError, match="is taken by a process"):
            services.up(settings, timeout_s=5)
    assert exited(worker)
    assert services.leftovers(settings, services.MLFLOW_SERVER) == []


def test_a_recycled_pid_is_never_signalled(settings: Settings):
    """A PID file whose PID now belongs to another process (here: this test) is stale."""
    settings.services.run_dir.mkdir(parents=True)
    record = {"pid": os.getpid(), "started": "1", "command": ["prefect", "server", "start"]}
    (settings.services.run_dir / f"{services.PREFECT_SERVER}.pid").write_text(json.dumps(record))
    assert services.recorded_pid(settings, services.PREFECT_SERVER) is None
    assert services.down(settings)[-1] == f"{services.PREFECT_SERVER}: was not running"
    assert not (settings.services.run_dir / f"{services.PREFECT_SERVER}.pid").exists()


def test_status_reports_a_dead_process_as_stopped(settings: Settings):
    pid = services.start_process(
        settings, services.MLFLOW_SERVER, [sys.executable, "-c", "import sys; sys.exit(0)"]
    )
    _wait_exited(pid)
    (mlflow,) = [s for s in services.status(settings) if s.name == services.MLFLOW_SERVER]
    assert not mlflow.running and not mlflow.healthy
    assert "stopped" in mlflow.render()


def test_a_port_taken_by_a_stranger_is_refused_with_one_line(settings: Settings):
    with socket.socket() as stranger:
        stranger.bind((settings.services.host, 0))
        stranger.listen()
        port = stranger.getsockname()[1]
        taken = settings.model_copy(
            update={"services": settings.services.model_copy(update={"mlflow_port": port})}
        )
        with pytest.raises(services.ServiceError, match=f"port 127.0.0.1:{port} is taken"):
            services.up(taken, timeout_s=5)
    # Refused before anything started: no Prefect server was left running either.
    assert all(not s.running for s in services.status(taken))
    assert not list(settings.services.run_dir.glob("*.pid"))


def test_a_service_that_dies_while_starting_names_its_log(settings: Settings):
    command = [sys.executable, "-c", "import sys; print('boom: bad flag'); sys.exit(2)"]
    with pytest.raises(
        services.ServiceError, match=r"exited while starting; see .*mlflow-server\.log"
    ):
        services.start_process(settings, services.MLFLOW_SERVER, command, {})
        wait_healthy(settings, services.MLFLOW_SERVER, services.mlflow_healthy, 10)
    assert "boom: bad flag" in services.log_file(settings, services.MLFLOW_SERVER).read_text()


def test_health_checks_are_false_when_nothing_answers(settings: Settings):
    assert not services.prefect_healthy(settings)
    assert not services.mlflow_healthy(settings)
    assert not services.worker_healthy(settings)


def test_the_secret_is_made_once_and_readable_by_its_owner_only(settings: Settings):
    settings.services.run_dir.mkdir(parents=True)
    assert local.prefect_auth_string(settings) is None
    assert "PREFECT_API_AUTH_STRING" not in services.prefect_env(settings)
    services.ensure_prefect_auth(settings)
    path = local.prefect_auth_file(settings)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    secret = local.prefect_auth_string(settings)
    user, _, password = secret.partition(":")
    assert user == "deepsummit" and len(password) >= 40
    services.ensure_prefect_auth(settings)
    assert local.prefect_auth_string(settings) == secret  # kept: a running server uses it
    assert services.prefect_env(settings)["PREFECT_API_AUTH_STRING"] == secret
    path.chmod(0o644)
    with pytest.raises(services.ServiceError, match="readable by other users: `chmod 600"):
        services.ensure_prefect_auth(settings)


# ---------------------------------------------------------------- the running servers


@pytest.fixture
def stack(services_stack: RunningServices) -> RunningServices:
    """The session's servers and worker (shared with tests/services/test_alerts.py)."""
    return services_stack


def _http(
    url: str, method: str = "GET", headers: dict[str, str] | None = None, data: bytes | None = None
) -> tuple[int, Message]:
    """Status and headers of a raw request (a browser's or an attacker's, not a client's)."""
    request = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers
    except urllib.error.HTTPError as error:
        return error.code, error.headers


# The name of every flow run the refused requests below try to create.
PROBE_RUN = {"name": "refused-probe"}


def _probe_runs(stack: RunningServices) -> int:
    """Flow runs named PROBE_RUN: none may exist (the nightly schedule adds runs of its own)."""
    api = services.prefect_api(stack.settings)
    return api.post("/flow_runs/count", {"flow_runs": {"name": {"any_": [PROBE_RUN["name"]]}}})


def test_an_api_call_without_the_secret_is_refused(stack: RunningServices):
    api = services.prefect_api(stack.settings)
    deployment = api.get("/deployments/name/summit/train")
    anonymous = PrefectApi(api.url, None)
    wrong = PrefectApi(api.url, "deepsummit:guessed")
    for client in (anonymous, wrong):
        with pytest.raises(urllib.error.HTTPError) as refused:
            client.get("/deployments/name/summit/train")
        assert refused.value.code == 401
    # A write without the secret cannot even get the CSRF token it needs.
    with pytest.raises(urllib.error.HTTPError) as refused:
        anonymous.post(f"/deployments/{deployment['id']}/create_flow_run", PROBE_RUN)
    assert refused.value.code == 401
    assert _probe_runs(stack) == 0
    assert services.prefect_healthy(stack.settings)  # the health probe needs no secret


def test_a_cross_origin_request_is_refused(stack: RunningServices):
    api = services.prefect_api(stack.settings)
    deployment = api.get("/deployments/name/summit/train")
    create = f"{api.url}/deployments/{deployment['id']}/create_flow_run"
    own_origin = services.browser_origins(stack.settings, stack.settings.services.prefect_port)[0]
    preflight = {
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type",
    }
    status, headers = _http(create, "OPTIONS", {"Origin": EVIL_ORIGIN, **preflight})
    assert status == 400 and headers.get("Access-Control-Allow-Origin") is None
    status, headers = _http(create, "OPTIONS", {"Origin": own_origin, **preflight})
    assert status == 200 and headers.get("Access-Control-Allow-Origin") == own_origin
    # A form-like POST needs no preflight: it is refused for want of a CSRF token, credentials
    # or not (a page cannot read the token endpoint's answer across origins).
    form = {"Origin": EVIL_ORIGIN, "Content-Type": "text/plain"}
    secret = local.prefect_auth_string(stack.settings)
    authorised = {**form, "Authorization": f"Basic {b64encode(secret.encode()).decode()}"}
    for headers in (form, authorised):
        status, _ = _http(create, "POST", headers, json.dumps(PROBE_RUN).encode())
        assert status == 403
    assert _probe_runs(stack) == 0


def test_mlflow_answers_its_own_host_names_and_origins_only(stack: RunningServices):
    port = stack.settings.services.mlflow_port
    search = f"http://127.0.0.1:{port}/api/2.0/mlflow/experiments/search?max_results=1"
    assert _http(search)[0] == 200
    # A DNS-rebinding page reaches the server under its own name; MLflow's default would also
    # take any private-network address.
    for host in ("evil.example", "10.0.0.5", "192.168.1.20"):
        assert _http(search, headers={"Host": f"{host}:{port}"})[0] == 403
    create = f"http://127.0.0.1:{port}/api/2.0/mlflow/experiments/create"
    body = json.dumps({"name": "cross-origin"}).encode()
    json_from = {"Content-Type": "application/json"}
    assert _http(create, "POST", {**json_from, "Origin": EVIL_ORIGIN}, body)[0] == 403
    own_origin = services.browser_origins(stack.settings, port)[0]
    assert _http(create, "POST", {**json_from, "Origin": own_origin}, body)[0] == 200


@pytest.mark.parametrize(
    "job_variables",
    [
        {"command": "touch /tmp/deepsummit-pwned"},
        {"env": {"PYTHONSTARTUP": "/tmp/evil.py"}},
        {"env.LD_PRELOAD": "/tmp/evil.so"},
        {"working_dir": "/tmp"},
    ],
)
def test_a_flow_run_cannot_choose_its_command_or_environment(
    stack: RunningServices, job_variables: dict[str, object]
):
    api = services.prefect_api(stack.settings)
    deployment = api.get("/deployments/name/summit/train")
    with pytest.raises(urllib.error.HTTPError) as refused:
        api.post(
            f"/deployments/{deployment['id']}/create_flow_run",
            {**PROBE_RUN, "job_variables": job_variables},
        )
    assert refused.value.code == 422
    assert _probe_runs(stack) == 0


def test_a_flow_run_may_set_deepsummit_settings(stack: RunningServices):
    api = services.prefect_api(stack.settings)
    deployment = api.get("/deployments/name/summit/train")
    never = {"type": "SCHEDULED", "state_details": {"scheduled_time": "2999-01-01T00:00:00Z"}}
    # The key lets the server deduplicate the create, so a busy server's 503 is retried (a
    # create without one is sent once: a repeat could make a second run).
    run = api.post(
        f"/deployments/{deployment['id']}/create_flow_run",
        {
            "job_variables": {"env": {"DEEPSUMMIT_TRAIN__MAX_EPOCHS": "1"}},
            "state": never,
            "idempotency_key": f"settings-{uuid.uuid4()}",
        },
    )
    api.request("DELETE", f"/flow_runs/{run['id']}")
    assert run["job_variables"]["env"] == {"DEEPSUMMIT_TRAIN__MAX_EPOCHS": "1"}


def test_the_secret_is_never_printed_and_status_says_where_it_is(stack: RunningServices):
    secret = local.prefect_auth_string(stack.settings)
    status = deepsummit(stack.overrides, "status")
    assert status.returncode == 0, status.stderr
    assert secret not in "\n".join(stack.up_lines) + status.stdout + status.stderr
    login = next(line for line in status.stdout.splitlines() if line.startswith("Prefect login"))
    assert str(local.prefect_auth_file(stack.settings)) in login
    # The worker's health is asked of the API with the secret and a CSRF token.
    assert all(service.healthy for service in services.status(stack.settings))
    assert "NOT healthy" not in status.stdout and "stopped" not in status.stdout
    # The health check a script runs: exit 0 and every service healthy in the document.
    as_json = deepsummit(stack.overrides, "status", "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert [s["healthy"] for s in json.loads(as_json.stdout)["services"]] == [True] * 3


def test_up_refuses_a_server_that_does_not_take_the_secret(stack: RunningServices):
    path = local.prefect_auth_file(stack.settings)
    secret = path.read_text()
    path.write_text("deepsummit:not-the-servers-secret\n")
    try:
        with pytest.raises(services.ServiceError, match=r"refuses the secret in .*prefect-auth"):
            services.up(stack.settings)
    finally:
        path.write_text(secret)
