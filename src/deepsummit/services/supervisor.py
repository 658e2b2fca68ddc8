"""The local services: a Prefect server, an MLflow server and a Prefect worker, as processes.

Plain subprocess management (Prefect is imported only by `up`, for the alerts automation of
deepsummit/services/alerts.py; the rest talks to the server over HTTP): each service is started in
its own session (`setsid`), so its whole process group (uvicorn workers, flow-run subprocesses) can
be stopped together; its PID, start time and command go to `<run_dir>/<name>.pid` and its output to
`<run_dir>/<name>.log`. `up` is idempotent (a service whose recorded process is alive is left alone)
and `down` stops exactly the processes `up` recorded, by PID, never by name.

Secure by default, because a browser reaches 127.0.0.1 too (any page the user visits, or a
DNS-rebinding site): the Prefect server requires HTTP basic auth with a secret generated at the
first `up` (`<run_dir>/prefect-auth`, mode 0600, never printed), checks CSRF tokens on writes and
allows cross-origin requests from its own UI only; MLflow accepts only its own Host names and
origins. Everything `up` starts that talks to Prefect gets the secret in its environment.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from deepsummit.core.config import PROJECT_DIR_VARIABLE, PROJECT_ROOT, Settings
from deepsummit.core.errors import ServiceUnavailable
from deepsummit.core.http_retry import send
from deepsummit.services import alerts
from deepsummit.services.prefect_api import PrefectApi

PREFECT_SERVER = "prefect-server"
MLFLOW_SERVER = "mlflow-server"
WORKER = "worker"
SERVICE_NAMES = (PREFECT_SERVER, MLFLOW_SERVER, WORKER)

PROCESS_JOB_TEMPLATE = PROJECT_ROOT / "deployments" / "process-job-template.json"
PREFECT_YAML = PROJECT_ROOT / "prefect.yaml"

WORKER_NAME = "deepsummit-local"


class ServiceError(ServiceUnavailable):
    """A service did not start, did not become healthy, or its port is taken."""


@dataclass(frozen=True)
class ServiceStatus:
    name: str
    pid: int | None
    running: bool
    healthy: bool
    url: str
    log: Path
    leftover: tuple[int, ...] = ()  # its session's processes alive after its main one died
    answering: bool = False  # something answers at `url` (what really listens)

    def render(self) -> str:
        if not self.running and self.leftover:
            pids = ", ".join(map(str, self.leftover))
            serving = f", still answering at {self.url}" if self.answering else ""
            return (
                f"{self.name:<15} main process DIED; pid {pids} of its group still running"
                f"{serving}; `deepsummit down` stops them"
            )
        if not self.running:
            return f"{self.name:<15} stopped                  {self.url}"
        state = "healthy" if self.healthy else "running, NOT healthy"
        return f"{self.name:<15} {state:<24} {self.url}  (pid {self.pid}, log {self.log})"


def _bin(name: str) -> str:
    """An executable of this environment (the venv's `prefect`, `mlflow`)."""
    return str(Path(sys.executable).parent / name)


def prefect_home(settings: Settings) -> Path:
    """The server's PREFECT_HOME: its SQLite database is this project's own, not ~/.prefect."""
    return settings.services.run_dir / "prefect-home"


def prefect_auth_file(settings: Settings) -> Path:
    """Where the Prefect server's secret (`user:password`) is kept; `deepsummit status` names it."""
    return settings.services.run_dir / "prefect-auth"


def prefect_auth_string(settings: Settings) -> str | None:
    """The Prefect server's secret, None before the first `up` generated it."""
    path = prefect_auth_file(settings)
    return path.read_text().strip() if path.exists() else None


def _ensure_prefect_auth(settings: Settings) -> None:
    """Generate the server's secret once, readable by this user only (O_EXCL: never clobber one
    a running server already uses); refuse one that other users can read."""
    path = prefect_auth_file(settings)
    if not path.exists():
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as file:
            file.write(f"deepsummit:{secrets.token_urlsafe(32)}\n")
    if path.stat().st_mode & 0o077:
        raise ServiceError(
            f"{path} is readable by other users: `chmod 600 {path}`; if it may have leaked,"
            " `deepsummit down`, delete it and `deepsummit up` for a new one"
        )


def prefect_ui_url(settings: Settings) -> str:
    """The Prefect UI people browse: the V2 UI, where the server's root leads and where a link
    to a page survives the login (it returns to that page; the V1 UI's deep links do not)."""
    return settings.services.prefect_api_url.removesuffix("/api") + "/v2"


def prefect_login_hint(settings: Settings) -> str:
    """How a person logs in to the Prefect UI: where the secret is, never the secret itself."""
    path = prefect_auth_file(settings)
    if not path.exists():
        return "created by the first `deepsummit up`"
    return f"the UI asks for it: paste the line of {path} (kept there, never printed)"


def prefect_api(settings: Settings) -> PrefectApi:
    """The local Prefect server's REST API, with its secret."""
    return PrefectApi(settings.services.prefect_api_url, prefect_auth_string(settings))


def prefect_env(settings: Settings) -> dict[str, str]:
    """Environment for anything that talks to the local Prefect server."""
    env = {
        "PREFECT_API_URL": settings.services.prefect_api_url,
        # The links Prefect prints (`prefect deployment run`) and sends (alerts) open the V2 UI.
        "PREFECT_UI_URL": prefect_ui_url(settings),
        "PREFECT_HOME": str(prefect_home(settings)),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        # The stages' own log lines (per-epoch metrics, counts) go to the flow run's logs too.
        "PREFECT_LOGGING_EXTRA_LOGGERS": "deepsummit",
    }
    if (auth_string := prefect_auth_string(settings)) is not None:
        env["PREFECT_API_AUTH_STRING"] = auth_string
    return env


def browser_origins(settings: Settings, port: int) -> list[str]:
    """The origins a browser on this machine loads a service's UI from: its host, and
    `localhost` as well when that host is the loopback address."""
    host = settings.services.host
    hosts = [host, "localhost"] if host == "127.0.0.1" else [host]
    return [f"http://{name}:{port}" for name in hosts]


def mlflow_store(settings: Settings) -> tuple[str, Path]:
    """The MLflow server's backend store URI and artifact folder, both under var/."""
    return (
        f"sqlite:///{settings.paths.var_dir / 'mlflow.db'}",
        settings.paths.var_dir / "mlartifacts",
    )


# ---------------------------------------------------------------- process records


def _pid_file(settings: Settings, name: str) -> Path:
    return settings.services.run_dir / f"{name}.pid"


def log_file(settings: Settings, name: str) -> Path:
    return settings.services.run_dir / f"{name}.log"


def _start_time(pid: int) -> str | None:
    """The kernel's start time of `pid` (guards against a recycled PID); None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    except OSError:  # no /proc (not Linux): fall back to "exists"
        return "" if _exists(pid) else None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":  # a zombie has exited; only its exit status is left
        return None
    return fields[19]


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _reap(pid: int) -> None:
    """Collect the exit status of our own child, so it does not linger as a zombie."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def recorded_pid(settings: Settings, name: str) -> int | None:
    """The PID `up` recorded for `name`, if that very process is still alive."""
    path = _pid_file(settings, name)
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    pid = int(record["pid"])
    _reap(pid)
    started = _start_time(pid)
    if started is None or (record.get("started") and started != record["started"]):
        return None
    return pid


def _session_members(session: int, since: str) -> list[tuple[int, str]]:
    """(PID, start time) of the live processes of session `session` started no earlier than
    `since` (Linux /proc; none elsewhere)."""
    return [
        (pid, fields[19])
        for pid, fields in _process_table()
        if fields[0] != "Z" and int(fields[3]) == session and int(fields[19]) >= int(since)
    ]


def _process_table() -> list[tuple[int, list[str]]]:
    """(PID, the fields of /proc/<pid>/stat after the command name) of every process: state
    [0], parent [1], group [2], session [3], start time [19]. Empty without /proc."""
    table = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            table.append((int(stat.parent.name), stat.read_text().rsplit(")", 1)[1].split()))
        except OSError:
            continue
    return table


def leftovers(settings: Settings, name: str) -> list[tuple[int, str]]:
    """The processes of the session `up` started for `name` that outlived its main process
    (an OOM kill of MLflow's main process leaves its uvicorn worker serving): (PID, start
    time). None while the main process lives, or when its PID now leads another session (a
    recycled PID: that session is someone else's)."""
    path = _pid_file(settings, name)
    if not path.exists() or recorded_pid(settings, name) is not None:
        return []
    record = json.loads(path.read_text())
    session, since = int(record["pid"]), record.get("started")
    if not since or _start_time(session) is not None:
        return []
    return _session_members(session, since)


def start_process(
    settings: Settings, name: str, command: list[str], env: dict[str, str] | None = None
) -> int:
    """Start `command` in a new session, output to its log file; record and return its PID."""
    settings.services.run_dir.mkdir(parents=True, exist_ok=True)
    log = log_file(settings, name).open("ab")
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})},
        cwd=PROJECT_ROOT,
        start_new_session=True,  # setsid: the process leads its own group
    )
    log.close()
    record = {"pid": process.pid, "started": _start_time(process.pid), "command": command}
    _pid_file(settings, name).write_text(json.dumps(record))
    return process.pid


def _descendants(pid: int) -> list[tuple[int, str]]:
    """(PID, start time) of every process below `pid` (Linux /proc; none elsewhere)."""
    parents: dict[int, list[tuple[int, str]]] = {}
    for child, fields in _process_table():
        parents.setdefault(int(fields[1]), []).append((child, fields[19]))
    found, queue = [], [pid]
    while queue:
        for child in parents.get(queue.pop(), []):
            found.append(child)
            queue.append(child[0])
    return found


STOPPED = "stopped"
NOT_RUNNING = "was not running"


def stop_process(settings: Settings, name: str, grace_s: float = 10.0) -> str:
    """Stop the recorded process of `name` and everything below it, or, when that process has
    died, what is left of its session; says which.

    SIGTERM to its process group and to each descendant (a worker starts flow runs in their own
    sessions, so the group alone would miss them), then SIGTERM again, because a Prefect worker
    shields its first one while it starts a graceful shutdown; SIGKILL after the grace period.
    A process is only signalled while it is the same process (same start time).
    """
    pid = recorded_pid(settings, name)
    path = _pid_file(settings, name)
    if pid is None:
        left = leftovers(settings, name)
        path.unlink(missing_ok=True)
        if not left:
            return NOT_RUNNING
        _terminate(left, grace_s)
        pids = ", ".join(str(p) for p, _ in left)
        return f"{STOPPED} what its dead main process left running (pid {pids})"
    _terminate([(pid, _start_time(pid)), *_descendants(pid)], grace_s)
    path.unlink(missing_ok=True)
    return STOPPED


def _terminate(targets: list[tuple[int, str | None]], grace_s: float) -> None:
    """SIGTERM twice, then SIGKILL, to each target that is still the same process."""
    for sig, wait_s in (
        (signal.SIGTERM, grace_s / 2),
        (signal.SIGTERM, grace_s / 2),
        (signal.SIGKILL, 5.0),
    ):
        alive = [(p, started) for p, started in targets if _start_time(p) == started]
        for p, _ in alive:
            _signal(p, sig)
        if _wait_gone([p for p, _ in alive], wait_s):
            break


def _signal(pid: int, sig: signal.Signals) -> None:
    """Signal `pid`, and its whole group when it leads one (uvicorn workers, job children)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)


def _wait_gone(pids: list[int], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        for pid in pids:
            _reap(pid)
        if all(_start_time(pid) is None for pid in pids):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


# ---------------------------------------------------------------- health


def http_ok(url: str, timeout_s: float = 2.0) -> bool:
    """`url` answers 2xx, once a busy server's transient answers are over; False when it
    refuses, nothing answers, or the transient answers go on."""
    try:
        status, _ = send(urllib.request.Request(url), timeout_s)
    except (urllib.error.URLError, OSError, ValueError):
        return False
    return 200 <= status < 300


def port_in_use(host: str, port: int) -> bool:
    """Something listens on host:port. A port nobody listens on refuses at once; the timeout
    is for a listener on a machine whose cores are all busy, where even a loopback handshake
    has taken over half a second (a test that held the port saw it free)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(5.0)
        return sock.connect_ex((host, port)) == 0


def prefect_healthy(settings: Settings) -> bool:
    return http_ok(f"{settings.services.prefect_api_url}/health")


def mlflow_healthy(settings: Settings) -> bool:
    return http_ok(f"{settings.services.mlflow_url}/health")


def worker_healthy(settings: Settings) -> bool:
    """The server lists our worker as ONLINE in the work pool (its heartbeats are recent)."""
    path = f"/work_pools/{settings.services.work_pool}/workers/filter"
    try:
        workers = prefect_api(settings).post(path, {}, timeout_s=2.0)
    except (urllib.error.URLError, OSError, ValueError):
        return False
    return any(w["name"] == WORKER_NAME and w["status"] == "ONLINE" for w in workers)


def _refuses(api: PrefectApi) -> bool:
    """True when the server answers 401 to `api`'s credentials."""
    try:
        api.get("/admin/version")
    except urllib.error.HTTPError as error:
        if error.code == 401:
            return True
        raise ServiceError(f"{PREFECT_SERVER}: /admin/version answered {error.code}") from None
    return False


def _check_prefect_auth(settings: Settings) -> None:
    """The running server refuses a request without the secret and takes ours: a server
    started before auth was on, or with another secret, is never silently used."""
    restart = "run `deepsummit down`, then `deepsummit up`"
    if not _refuses(PrefectApi(settings.services.prefect_api_url, None)):
        raise ServiceError(
            f"{PREFECT_SERVER} answers without credentials (started before auth was on); {restart}"
        )
    if _refuses(prefect_api(settings)):
        raise ServiceError(
            f"{PREFECT_SERVER} refuses the secret in {prefect_auth_file(settings)}; {restart}"
        )


def _wait_healthy(
    settings: Settings, name: str, check: Callable[[Settings], bool], timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check(settings):
            return
        if recorded_pid(settings, name) is None:
            raise ServiceError(f"{name} exited while starting; see {log_file(settings, name)}")
        time.sleep(0.5)
    raise ServiceError(
        f"{name} not healthy after {timeout_s:.0f} s; see {log_file(settings, name)}"
    )


# ---------------------------------------------------------------- the services


def _prefect_server_command(settings: Settings) -> list[str]:
    svc = settings.services
    return [
        _bin("prefect"), "server", "start",
        "--host", svc.host, "--port", str(svc.prefect_port), "--analytics-off",
    ]  # fmt: skip


def _mlflow_server_command(settings: Settings) -> list[str]:
    backend, artifacts = mlflow_store(settings)
    svc = settings.services
    origins = browser_origins(settings, svc.mlflow_port)
    # Its own names only: MLflow's default also takes any private-network Host (10.*, 192.168.*),
    # which a DNS-rebinding site can produce.
    hosts = [origin.removeprefix("http://") for origin in origins]
    return [
        _bin("mlflow"), "server",
        "--host", svc.host, "--port", str(svc.mlflow_port), "--workers", "1",
        "--backend-store-uri", backend,
        "--artifacts-destination", str(artifacts),
        "--allowed-hosts", ",".join(hosts),
        "--cors-allowed-origins", ",".join(origins),
    ]  # fmt: skip


def _worker_command(settings: Settings) -> list[str]:
    return [
        _bin("prefect"), "worker", "start",
        "--pool", settings.services.work_pool, "--type", "process", "--name", WORKER_NAME,
    ]  # fmt: skip


def _server_env(settings: Settings) -> dict[str, str]:
    env = prefect_env(settings)
    # The server serves the API rather than talking to one; its UI must still be told where
    # the API is, or it assumes port 4200 whatever --port says.
    env["PREFECT_UI_API_URL"] = env.pop("PREFECT_API_URL")
    # SQLite: wait for a lock instead of failing a concurrent write at once.
    env["PREFECT_SERVER_DATABASE_TIMEOUT"] = "60"
    # A login, CSRF tokens on writes and its own UI as the only other origin: see the docstring.
    env["PREFECT_SERVER_API_AUTH_STRING"] = env["PREFECT_API_AUTH_STRING"]
    env["PREFECT_SERVER_CSRF_PROTECTION_ENABLED"] = "true"
    origins = browser_origins(settings, settings.services.prefect_port)
    env["PREFECT_SERVER_CORS_ALLOWED_ORIGINS"] = ",".join(origins)
    return env


def worker_env(settings: Settings) -> dict[str, str]:
    """What flow runs on the worker need: the server, the registry (the MLflow server `up`
    started, unless DEEPSUMMIT_MLFLOW__TRACKING_URI names another) and the project folder."""
    tracking = "DEEPSUMMIT_MLFLOW__TRACKING_URI"
    return {
        **prefect_env(settings),
        tracking: os.environ.get(tracking, settings.services.mlflow_url),
        "PREFECT_WORKER_QUERY_SECONDS": str(settings.services.worker_query_s),
        PROJECT_DIR_VARIABLE: str(PROJECT_ROOT),
    }


def _prefect_cli(settings: Settings, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [_bin("prefect"), *args],
        cwd=PROJECT_ROOT,
        env={**os.environ, **worker_env(settings)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    if check and result.returncode != 0:
        last = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ServiceError(f"prefect {' '.join(args)} failed: {last[0]}")
    return result


def _check_port(settings: Settings, name: str, port: int) -> None:
    if recorded_pid(settings, name) is None and port_in_use(settings.services.host, port):
        raise ServiceError(
            f"{name}: port {settings.services.host}:{port} is taken by a process that"
            " `deepsummit up` did not start; stop it or set another port in deepsummit.toml"
            " (services.prefect_port / services.mlflow_port)"
        )


def _ensure_process(
    settings: Settings,
    name: str,
    command: list[str],
    env: dict[str, str],
    check: Callable[[Settings], bool],
    timeout_s: float,
) -> bool:
    """Start `name` unless its recorded process is alive; wait until healthy. True if started."""
    started = recorded_pid(settings, name) is None
    if started:
        start_process(settings, name, command, env)
    _wait_healthy(settings, name, check, timeout_s)
    return started


def deployments_by_pool() -> dict[str, str]:
    """Deployment name → work pool name, as prefect.yaml declares them."""
    document = yaml.safe_load(PREFECT_YAML.read_text())
    return {d["name"]: d["work_pool"]["name"] for d in document["deployments"]}


def deploy(settings: Settings) -> list[str]:
    """Create the local work pool and apply the deployments of prefect.yaml whose pool exists
    (the local one always; `gpu` only where someone created it); the names applied."""
    local = settings.services.work_pool
    _prefect_cli(
        settings,
        "--no-prompt", "work-pool", "create", local,
        "--type", "process", "--base-job-template", str(PROCESS_JOB_TEMPLATE), "--overwrite",
    )  # fmt: skip
    wanted = deployments_by_pool()
    pools = {local} | {
        pool
        for pool in set(wanted.values()) - {local}
        if _prefect_cli(settings, "work-pool", "inspect", pool, check=False).returncode == 0
    }
    names = [name for name, pool in wanted.items() if pool in pools]
    _prefect_cli(settings, "--no-prompt", "deploy", *(f"--name={n}" for n in names))
    return names


def up(settings: Settings, timeout_s: float = 120.0) -> list[str]:
    """Bring the servers and the worker up (what runs already is kept) and apply the alerts
    setting; lines of what was done."""
    settings.services.run_dir.mkdir(parents=True, exist_ok=True)
    settings.paths.var_dir.mkdir(parents=True, exist_ok=True)
    svc = settings.services
    done: list[str] = []
    # What an earlier start left behind when its main process died holds the port: ours to stop.
    for name in SERVICE_NAMES:
        if leftovers(settings, name):
            done.append(f"{name}: {stop_process(settings, name)}")
    # Both ports first: a taken one stops `up` before it starts anything.
    _check_port(settings, PREFECT_SERVER, svc.prefect_port)
    _check_port(settings, MLFLOW_SERVER, svc.mlflow_port)
    _ensure_prefect_auth(settings)
    servers = (
        (PREFECT_SERVER, _prefect_server_command, _server_env(settings), prefect_healthy),
        (MLFLOW_SERVER, _mlflow_server_command, {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
         mlflow_healthy),
    )  # fmt: skip
    for name, command, env, check in servers:
        started = _ensure_process(settings, name, command(settings), env, check, timeout_s)
        done.append(f"{name}: {'started' if started else 'already running'}")
    _check_prefect_auth(settings)
    if recorded_pid(settings, WORKER) is None:
        deployed = deploy(settings)
        done.append(f"deployments applied: {', '.join(deployed)}")
    started = _ensure_process(
        settings, WORKER, _worker_command(settings), worker_env(settings), worker_healthy, timeout_s
    )
    done.append(f"{WORKER}: {'started' if started else 'already running'}")
    done.append(alerts.apply(settings, prefect_api(settings)))
    return done


def down(settings: Settings, grace_s: float = 10.0) -> list[str]:
    """Stop what `up` started, worker first (so no run is picked up while the servers stop)."""
    return [f"{name}: {stop_process(settings, name, grace_s)}" for name in reversed(SERVICE_NAMES)]


def describe_alerts(settings: Settings) -> str:
    """Whether failed runs are alerted, asking the local server when it runs."""
    return alerts.describe(settings, prefect_api(settings))


def status(settings: Settings) -> list[ServiceStatus]:
    svc = settings.services
    urls = {
        PREFECT_SERVER: (svc.prefect_api_url.removesuffix("/api"), prefect_healthy),
        MLFLOW_SERVER: (svc.mlflow_url, mlflow_healthy),
        WORKER: (f"work pool {svc.work_pool!r}", worker_healthy),
    }
    statuses = []
    for name in SERVICE_NAMES:
        pid = recorded_pid(settings, name)
        url, check = urls[name]
        answering = check(settings)
        statuses.append(
            ServiceStatus(
                name,
                pid,
                pid is not None,
                pid is not None and answering,
                url,
                log_file(settings, name),
                tuple(p for p, _ in leftovers(settings, name)),
                answering,
            )
        )
    return statuses
