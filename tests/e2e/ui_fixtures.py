"""Fixtures of the UI tests: a headless browser, and throwaway Prefect and MLflow servers.

Each server runs in its own process group on a free loopback port with its state under the test's
tmp folder, and is stopped by its process id when the test ends.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from e2e.browser import Browser, launch_browser

BIN = Path(sys.executable).parent
STARTUP_SECONDS = 90


@dataclass(frozen=True)
class LocalServer:
    url: str
    log: Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_healthy(process: subprocess.Popen, health_url: str, log: Path) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{health_url}: server exited {process.returncode}, see {log}")
        try:
            with urllib.request.urlopen(health_url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{health_url}: not healthy after {STARTUP_SECONDS} s, see {log}")


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM to the server's process group (its uvicorn workers too); SIGKILL if it lingers."""
    for sig, grace in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture
def prefect_server(tmp_path: Path) -> Iterator[LocalServer]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "prefect-server.log"
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        # Without this the UI calls the API on the default port 4200, not the one served here.
        "PREFECT_UI_API_URL": f"{url}/api",
    }
    env.pop("PREFECT_API_URL", None)
    command = [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1"]
    command += ["--port", str(port), "--analytics-off"]
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        _wait_healthy(process, f"{url}/api/health", log)
        yield LocalServer(url=url, log=log)
    finally:
        _stop(process)


@pytest.fixture
def mlflow_server(tmp_path: Path) -> Iterator[LocalServer]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "mlflow-server.log"
    root = tmp_path / "mlflow"
    root.mkdir()
    # Job execution off: otherwise the server spawns job workers (~1.3 GB).
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    command = [str(BIN / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port)]
    command += ["--workers", "1", "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}"]
    command += ["--artifacts-destination", str(root / "artifacts")]
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        _wait_healthy(process, f"{url}/health", log)
        yield LocalServer(url=url, log=log)
    finally:
        _stop(process)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Browser]:
    shots = tmp_path / "screenshots"
    print(f"screenshots of this test: {shots}")
    with launch_browser(shots) as opened:
        yield opened
