"""The services' processes: each started in its own session (`setsid`), so its whole process
group (uvicorn workers, flow-run subprocesses) can be stopped together; its PID, start time and
command recorded in `<run_dir>/<name>.pid`, its output in `<run_dir>/<name>.log`; stopped by
the PID recorded, never by name.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

from deepsummit.core.config import Settings
from deepsummit.core.sections import PROJECT_ROOT


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


def reap(pid: int) -> None:
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
    reap(pid)
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
            reap(pid)
        if all(_start_time(pid) is None for pid in pids):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
