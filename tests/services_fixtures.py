"""The local services (`deepsummit up`) for tests: on free ports, every file under one folder.

`services_stack`: one `up` for the session, shared by the modules of tests/conftest.py's
SHARED_STACK_MODULES (each leaves it as it found it; pytest-xdist hands them to one worker);
never the default ports, so a `make train` left running beside the tests changes nothing.
"""

from __future__ import annotations

import configparser
import itertools
import os
import queue
import random
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from flows_fixtures import as_environment, isolated_paths
from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL

from deepsummit.core.config import Settings, deep_merge, load_settings
from deepsummit.core.sections import PROJECT_ROOT
from deepsummit.services import local
from deepsummit.services import supervisor as services

# Ports below the kernel's ephemeral range (net.ipv4.ip_local_port_range, 32768-60999 by
# default): no outgoing connection takes one between `free_port` and the server's bind, as one
# could take a port that bind(0) handed out. Each pytest-xdist worker has a band of its own, so
# two workers never hand out the same port, and a process walks its band from a random start,
# so it never hands out one port twice.
FIRST_PORT, BAND, BANDS = 20000, 1500, 8


def exited(pid: int) -> bool:
    """Process `pid` has exited: no such process, or a zombie its parent has not collected."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _ports() -> Iterator[int]:
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")) % BANDS
    low = FIRST_PORT + worker * BAND
    start = random.randrange(BAND)
    return itertools.cycle([*range(low + start, low + BAND), *range(low, low + start)])


_PORTS = _ports()


def free_port() -> int:
    """A port of 127.0.0.1 that nothing listens on, and that this process has not handed out
    recently."""
    for port in itertools.islice(_PORTS, BAND):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {FIRST_PORT}..{FIRST_PORT + BAND * BANDS}")


# How long a test waits for a server to answer its health check: on a slow or busy machine a
# Prefect server with a new database takes minutes, not the 10-30 s of a quiet one (the product's
# 120 s is for a person watching `deepsummit up`); pytest-timeout still bounds the test.
STARTUP_TIMEOUT_S = 600.0


@dataclass
class RunningServices:
    settings: Settings
    overrides: dict[str, Any]  # what made `settings`, for `deepsummit` in a subprocess
    up_lines: list[str]  # what the first `up` reported


def prefect_server(settings: Settings) -> dict[Any, Any]:
    """Prefect client settings (for `temporary_settings`) of the services' server, with the
    secret `up` generated."""
    return {
        PREFECT_API_URL: settings.services.prefect_api_url,
        PREFECT_API_AUTH_STRING: local.prefect_auth_string(settings),
    }


@contextmanager
def running_services(
    root: Path, overrides: dict[str, Any] | None = None
) -> Iterator[RunningServices]:
    """`services.up` on free ports under `root` (tiny profile), `services.down` afterwards."""
    ports = {"prefect_port": free_port(), "mlflow_port": free_port()}
    merged = deep_merge(deep_merge(isolated_paths(root), {"services": ports}), overrides or {})
    settings = load_settings("tiny", merged)
    try:
        yield RunningServices(settings, merged, services.up(settings, STARTUP_TIMEOUT_S))
    finally:
        services.down(settings)


@pytest.fixture(scope="session")
def services_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServices]:
    """The servers and the worker, started once for the modules that share them (their
    Prefect server starts in 10-30 s, the deployments and the worker take as long again)."""
    with running_services(tmp_path_factory.mktemp("services")) as running:
        yield running


def deepsummit(overrides: dict[str, Any], *args: str) -> subprocess.CompletedProcess:
    """The `deepsummit` command with these settings (as DEEPSUMMIT_* variables), as a user runs
    it: nothing of this test process's Prefect settings leaks in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "DEEPSUMMIT_"))}
    return subprocess.run(
        [sys.executable, "-m", "deepsummit.cli.app", *args],
        env={**env, **as_environment(overrides)},
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def output_lines(process: subprocess.Popen[str]) -> queue.Queue[str | None]:
    """The process's output, line by line as it comes (None once it has closed)."""
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return lines


def mlflow_server_settings(root: Path, overrides: dict[str, Any] | None = None) -> Settings:
    """Tiny-profile settings of an MLflow server on a free port with its files under `root`,
    and `overrides` on top."""
    port = free_port()
    own = {
        "paths": {"var_dir": str(root / "var")},
        "services": {"run_dir": str(root / "services"), "mlflow_port": port},
        "mlflow": {"tracking_uri": f"http://127.0.0.1:{port}"},
    }
    return load_settings("tiny", deep_merge(own, overrides or {}))


def start_mlflow(settings: Settings) -> None:
    """The MLflow server of `deepsummit up` alone, once it answers."""
    services.start_service(settings, services.MLFLOW_SERVER, 120)


def start_mlflow_auth(
    settings: Settings, root: Path, admin: tuple[str, str], allowed_hosts: list[str] | None = None
) -> None:
    """MLflow's basic-auth app as deployments/docker-compose.yml runs it (its mlflow-auth.ini, an
    admin, no job runner) on the host and port of `settings.services`, its stores under `root`,
    taking the Host names `allowed_hosts` (MLflow's default without). Started, not yet healthy."""
    config = configparser.ConfigParser()
    config.read(PROJECT_ROOT / "deployments" / "mlflow-auth.ini")
    config["mlflow"]["database_uri"] = f"sqlite:///{root / 'basic_auth.db'}"  # not the volume
    with (root / "mlflow-auth.ini").open("w") as file:
        config.write(file)
    svc = settings.services
    hosts = ["--allowed-hosts", ",".join(allowed_hosts)] if allowed_hosts else []
    command = [
        local.bin_path("mlflow"), "server", "--app-name", "basic-auth",
        # One worker: the compose file's two would cost seconds of CPU each to start.
        "--host", svc.host, "--port", str(svc.mlflow_port), "--workers", "1", *hosts,
        "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
        "--artifacts-destination", str(root / "artifacts"),
    ]  # fmt: skip
    services.start_process(
        settings,
        services.MLFLOW_SERVER,
        command,
        {
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
            "MLFLOW_AUTH_CONFIG_PATH": str(root / "mlflow-auth.ini"),
            "MLFLOW_AUTH_ADMIN_USERNAME": admin[0],
            "MLFLOW_AUTH_ADMIN_PASSWORD": admin[1],
            "MLFLOW_FLASK_SERVER_SECRET_KEY": "tests",
        },
    )


def stop_mlflow(settings: Settings) -> None:
    services.stop_process(settings, services.MLFLOW_SERVER, grace_s=2.0)


@contextmanager
def running_scorer(overrides: dict[str, Any]) -> Iterator[Settings]:
    """The scorer of `overrides`, started as `deepsummit up` starts it and answering; stopped
    after."""
    settings = load_settings(overrides=overrides)
    try:
        services.start_service(
            settings, services.SCORER, STARTUP_TIMEOUT_S, as_environment(overrides)
        )
        yield settings
    finally:
        services.stop_process(settings, services.SCORER)


def wait_champion_loaded(settings: Settings, line: str = "deepsummit v1 loaded") -> None:
    """Until the scorer's log says the loading thread of each of its answering processes
    loaded the champion (`line`)."""
    scorer_log = services.log_file(settings, services.SCORER)
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while scorer_log.read_text().count(line) < settings.services.answering_processes:
        assert time.monotonic() < deadline, scorer_log.read_text()
        time.sleep(0.2)
