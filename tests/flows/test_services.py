"""Process management of pipeline/services.py with real processes (the servers themselves are
started in tests/e2e/test_main_job.py)."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

import pytest

from flows import services
from pipeline.config import Settings, load_settings

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


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return load_settings(overrides={"services": {"run_dir": str(tmp_path / "services")}})


def _gone(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"


def _wait_for(path: Path) -> list[int]:
    for _ in range(100):
        if path.exists() and path.read_text():
            return [int(pid) for pid in path.read_text().split()]
        time.sleep(0.05)
    raise AssertionError(f"{path} never written")


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
    assert services.stop_process(settings, services.WORKER, grace_s=1.0) is True
    assert time.monotonic() - started < 8
    assert _gone(pid) and _gone(in_group) and _gone(own_session)
    assert services.recorded_pid(settings, services.WORKER) is None
    assert services.stop_process(settings, services.WORKER) is False  # nothing left to stop


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
    for _ in range(100):
        services._reap(pid)
        if _gone(pid):
            break
        time.sleep(0.05)
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
        services._ensure_process(
            settings, services.MLFLOW_SERVER, command, {}, services.mlflow_healthy, 10
        )
    assert "boom: bad flag" in services.log_file(settings, services.MLFLOW_SERVER).read_text()


def test_health_checks_are_false_when_nothing_answers(settings: Settings):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    quiet = settings.model_copy(
        update={
            "services": settings.services.model_copy(
                update={"prefect_port": free, "mlflow_port": free}
            )
        }
    )
    assert not services.prefect_healthy(quiet)
    assert not services.mlflow_healthy(quiet)
    assert not services.worker_healthy(quiet)
