"""The local services: a Prefect server, an MLflow server, a Prefect worker and the scorer
(deepsummit/serve/scorer.py), as processes.

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

import functools
import os
import subprocess
import sys
import urllib.error
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

from deepsummit.core.config import Settings
from deepsummit.core.errors import ServiceError
from deepsummit.core.sections import PROJECT_DIR_VARIABLE, PROJECT_ROOT
from deepsummit.services import alerts, postgres
from deepsummit.services.health import (
    check_prefect_auth,
    mlflow_healthy,
    port_in_use,
    prefect_healthy,
    scorer_healthy,
    wait_healthy,
    worker_healthy,
)
from deepsummit.services.local import (
    MLFLOW_SERVER,
    PREFECT_SERVER,
    PREFECT_YAML,
    PROCESS_JOB_TEMPLATE,
    SCORER,
    SERVICE_NAMES,
    WORKER,
    WORKER_NAME,
    ServiceStatus,
    bin_path,
    browser_origins,
    ensure_prefect_auth,
    mlflow_store,
    prefect_api,
    prefect_env,
)
from deepsummit.services.processes import (
    leftovers,
    log_file,
    recorded_pid,
    start_process,
    stop_process,
)


def _prefect_server_command(settings: Settings) -> list[str]:
    svc = settings.services
    return [
        bin_path("prefect"), "server", "start",
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
        bin_path("mlflow"), "server",
        "--host", svc.host, "--port", str(svc.mlflow_port), "--workers", "1",
        "--backend-store-uri", backend,
        # Clients send and fetch artifacts through the server (mlflow-artifacts:/): a worker on
        # another machine needs no path into the store (MLflow 3's default, said explicitly).
        "--serve-artifacts", "--artifacts-destination", str(artifacts),
        "--allowed-hosts", ",".join(hosts),
        "--cors-allowed-origins", ",".join(origins),
    ]  # fmt: skip


def _worker_command(settings: Settings) -> list[str]:
    """Prefect's process worker, checking each run against the pool's shipped template first
    (deepsummit/services/checked_worker.py)."""
    return [
        sys.executable, "-m", "deepsummit.services.checked_worker",
        "--pool", settings.services.work_pool, "--name", WORKER_NAME,
    ]  # fmt: skip


def _scorer_command(settings: Settings) -> list[str]:
    return [sys.executable, "-m", "deepsummit.serve.scorer", "--profile", settings.profile]


def _server_env(settings: Settings) -> dict[str, str]:
    env = prefect_env(settings)
    # The server serves the API rather than talking to one; its UI must still be told where
    # the API is, or it assumes port 4200 whatever --port says.
    env["PREFECT_UI_API_URL"] = env.pop("PREFECT_API_URL")
    # SQLite: wait for a lock instead of failing a concurrent write at once.
    env["PREFECT_SERVER_DATABASE_TIMEOUT"] = "60"
    if settings.services.database == "postgresql":
        env["PREFECT_SERVER_DATABASE_CONNECTION_URL"] = postgres.connection_url(
            settings, "prefect", driver="postgresql+asyncpg"
        )
    # Slot leases on disk (PREFECT_HOME), not in the server's memory: a restarted server would
    # otherwise have forgotten the lease of a slot it still counts as taken, and no run would
    # ever get that slot again (it frees a slot only by its lease).
    env["PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE"] = (
        "prefect.server.concurrency.lease_storage.filesystem"
    )
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
        [bin_path("prefect"), *args],
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
            " (services.prefect_port / mlflow_port / scorer_port)"
        )


@dataclass(frozen=True)
class Launch:
    """How `up` starts a service: its command, what it adds to the environment, and the check
    that it answers."""

    command: list[str]
    env: dict[str, str]
    healthy: Callable[[Settings], bool]


def launch(settings: Settings, name: str) -> Launch:
    """How `up` starts service `name` with `settings`."""
    if name == postgres.POSTGRES:
        return Launch(postgres.server_command(settings), {}, postgres.healthy)
    if name == PREFECT_SERVER:
        return Launch(_prefect_server_command(settings), _server_env(settings), prefect_healthy)
    if name == MLFLOW_SERVER:
        no_jobs = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        return Launch(_mlflow_server_command(settings), no_jobs, mlflow_healthy)
    if name == WORKER:
        return Launch(_worker_command(settings), worker_env(settings), worker_healthy)
    if name == SCORER:
        return Launch(_scorer_command(settings), {}, scorer_healthy)
    raise ValueError(f"no service {name!r}")


def start_service(
    settings: Settings,
    name: str,
    timeout_s: float | None = None,
    env: dict[str, str] | None = None,
) -> bool:
    """Start service `name` as `up` does (`env` added to its environment), unless its recorded
    process is alive; with `timeout_s`, wait until it answers. True if started."""
    how = launch(settings, name)
    started = recorded_pid(settings, name) is None
    if started:
        start_process(settings, name, how.command, how.env | (env or {}))
    if timeout_s is not None:
        wait_healthy(settings, name, how.healthy, timeout_s)
    return started


def deployments_by_pool() -> dict[str, str]:
    """Deployment name → work pool name, as prefect.yaml declares them."""
    document = yaml.safe_load(PREFECT_YAML.read_text())
    return {d["name"]: d["work_pool"]["name"] for d in document["deployments"]}


def is_locked(base_job_template: dict[str, Any]) -> bool:
    """Whether a work pool's template refuses the job variables it does not list and takes only
    names matching a pattern in `env`, as deployments/*-job-template.json do. Prefect's default
    templates let a flow run set the command."""
    variables = base_job_template.get("variables", {})
    env = variables.get("properties", {}).get("env", {})
    return variables.get("additionalProperties") is False and "pattern" in env.get(
        "propertyNames", {}
    )


def _pool_template(settings: Settings, pool: str) -> dict[str, Any] | None:
    """The base job template of the work pool `pool`; None where there is no such pool."""
    try:
        return prefect_api(settings).get(f"/work_pools/{pool}")["base_job_template"]
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return None
        raise


def deploy(settings: Settings) -> list[str]:
    """Create the local work pool and apply the deployments of prefect.yaml whose pool exists
    and is locked (the local one always; `gpu` only where someone created it with one of the
    templates of deployments/); lines of what was applied and what was not."""
    local = settings.services.work_pool
    _prefect_cli(
        settings,
        "--no-prompt", "work-pool", "create", local,
        "--type", "process", "--base-job-template", str(PROCESS_JOB_TEMPLATE), "--overwrite",
    )  # fmt: skip
    wanted = deployments_by_pool()
    pools, lines = {local}, []
    for pool in sorted(set(wanted.values()) - {local}):
        template = _pool_template(settings, pool)
        if template is None:
            continue
        if is_locked(template):
            pools.add(pool)
            continue
        held_back = ", ".join(name for name, on in wanted.items() if on == pool)
        lines.append(
            f"work pool {pool!r}: not applied ({held_back}): its job template lets a flow run "
            "choose its command; recreate the pool with one of deployments/*-job-template.json "
            "(docs/deployment.md#the-gpu-pool)"
        )
    names = [name for name, pool in wanted.items() if pool in pools]
    _prefect_cli(settings, "--no-prompt", "deploy", *(f"--name={n}" for n in names))
    return [f"deployments applied: {', '.join(names)}", *lines]


def _note(done: list[str], echo: Callable[[str], None] | None, *lines: str) -> None:
    """`lines` kept in `done`, and given to `echo` as they come where there is one."""
    done.extend(lines)
    for line in lines if echo is not None else ():
        echo(line)


def up(
    settings: Settings, timeout_s: float = 120.0, echo: Callable[[str], None] | None = None
) -> list[str]:
    """Bring the servers, the worker and the scorer up (what runs already is kept) and apply
    the alerts setting; lines of what was done, each also given to `echo` as it is done."""
    settings.services.run_dir.mkdir(parents=True, exist_ok=True)
    settings.paths.var_dir.mkdir(parents=True, exist_ok=True)
    svc = settings.services
    done: list[str] = []
    note = functools.partial(_note, done, echo)
    # What an earlier start left behind when its main process died holds the port: ours to stop.
    for name in service_names(settings):
        if leftovers(settings, name):
            note(f"{name}: {stop_process(settings, name)}")
    # The ports first: a taken one stops `up` before it starts anything.
    _check_port(settings, PREFECT_SERVER, svc.prefect_port)
    _check_port(settings, MLFLOW_SERVER, svc.mlflow_port)
    if svc.scorer:
        _check_port(settings, SCORER, svc.scorer_port)
    ensure_prefect_auth(settings)
    # The scorer first and waited for last: its start (importing PyTorch, 2 s of CPU) runs
    # beside the servers' rather than after them.
    scorer_started = svc.scorer and start_service(settings, SCORER)
    if svc.database == "postgresql":
        _check_port(settings, postgres.POSTGRES, svc.postgres_port)
        postgres.prepare(settings)
        started = start_service(settings, postgres.POSTGRES, timeout_s)
        created = postgres.create_databases(settings)
        note(
            f"{postgres.POSTGRES}: {'started' if started else 'already running'}"
            + (f" (created {', '.join(created)})" if created else "")
        )
    for name in (PREFECT_SERVER, MLFLOW_SERVER):
        started = start_service(settings, name, timeout_s)
        note(f"{name}: {'started' if started else 'already running'}")
    check_prefect_auth(settings)
    if recorded_pid(settings, WORKER) is None:
        note(*deploy(settings))
    started = start_service(settings, WORKER, timeout_s)
    note(f"{WORKER}: {'started' if started else 'already running'}")
    if svc.scorer:
        wait_healthy(settings, SCORER, scorer_healthy, timeout_s)
        note(f"{SCORER}: {'started' if scorer_started else 'already running'}")
    note(alerts.apply(settings, prefect_api(settings)))
    return done


def service_names(settings: Settings) -> tuple[str, ...]:
    """The services `up` starts, in order: PostgreSQL first where the servers use it, the
    scorer last where it is on."""
    first = (postgres.POSTGRES,) if settings.services.database == "postgresql" else ()
    last = (SCORER,) if settings.services.scorer else ()
    return (*first, *SERVICE_NAMES, *last)


def down(settings: Settings, grace_s: float = 10.0) -> list[str]:
    """Stop what `up` started, worker first (so no run is picked up while the servers stop)."""
    return [
        f"{name}: {stop_process(settings, name, grace_s)}"
        for name in reversed(service_names(settings))
    ]


def describe_alerts(settings: Settings) -> str:
    """Whether failed runs are alerted, asking the local server when it runs."""
    return alerts.describe(settings, prefect_api(settings))


def status(settings: Settings) -> list[ServiceStatus]:
    svc = settings.services
    urls = {
        PREFECT_SERVER: (svc.prefect_api_url.removesuffix("/api"), prefect_healthy),
        MLFLOW_SERVER: (svc.mlflow_url, mlflow_healthy),
        WORKER: (f"work pool {svc.work_pool!r}", worker_healthy),
        SCORER: (svc.scorer_url, scorer_healthy),
        postgres.POSTGRES: (f"postgresql://{svc.host}:{svc.postgres_port}", postgres.healthy),
    }
    statuses = []
    for name in service_names(settings):
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
