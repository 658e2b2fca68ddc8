"""The soak's nights: nightly `summit/train` runs of the tiny profile against local services of
their own (free ports, every file under one folder), each with at most one SIGKILL at a chosen
moment of the run (the stage process: the training flow run's while one runs, else the chain's;
the worker, the MLflow server or the Prefect server), the killed service brought back as
`deepsummit up` brings it back.

A kill counts only when it hit: the process was alive, was the one expected (its command line,
or for a stage process the run's id in its environment), died of the signal, and the run had
not finished yet. The signal goes through a pidfd, so it reaches that process and no other
that took its PID. Used by bench/soak.py (`make soak`, random draws) and tests/e2e/test_soak.py
(the short soak of `make test`, every kind once).
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import time
import urllib.error
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flows_fixtures import as_environment, isolated_paths
from services_fixtures import STARTUP_TIMEOUT_S, free_port
from soak_digests import Digests, failures, judge, take_digests

from deepsummit.core.config import Settings, deep_merge, load_settings
from deepsummit.core.errors import ServiceUnavailable
from deepsummit.flows.runner import result_storage
from deepsummit.services import supervisor as services
from deepsummit.services.prefect_api import PrefectApi
from deepsummit.services.processes import reap

PROFILE = "tiny"
FINAL_STATES = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")
STAGE_PROCESS = "stage process"
NO_KILL = "nothing (a clean run)"
TARGETS = (STAGE_PROCESS, services.WORKER, services.MLFLOW_SERVER, services.PREFECT_SERVER)
# What the command line of each service's main process holds (supervisor.py's commands): a kill
# checks it, rather than trusting the PID file it took the PID from.
COMMANDS = {
    services.PREFECT_SERVER: "prefect server start",
    services.MLFLOW_SERVER: "mlflow server",
    services.WORKER: "deepsummit.services.checked_worker",
}
# How long a SIGKILLed process may take to be gone (a process in uninterruptible I/O dies when
# the I/O ends).
DEATH_TIMEOUT_S = 30.0
# Connection errors of a server that is down or restarting: wait and ask again.
UNREACHABLE = (OSError, urllib.error.URLError, ServiceUnavailable, TimeoutError)


@dataclass
class Night:
    number: int
    target: str  # what the night kills: one of TARGETS, or NO_KILL
    delay_s: float  # when, in seconds after the run started
    killed: str = ""  # what was killed (pid), or why nothing was
    hit: bool = False  # a live process of `target` died of the kill while the run ran
    restored: str = ""  # what `up` did afterwards
    state: str = ""  # the run's final state
    children: dict[str, str] = field(default_factory=dict)  # its child flow runs' final states
    seconds: float = 0.0  # from the run's start to its end
    verdicts: dict[str, str] = field(default_factory=dict)  # item → what its digests showed
    failures: list[str] = field(default_factory=list)  # what the digests should not have shown


@dataclass
class SoakStack:
    """The soak's services and the deployment its nights run."""

    settings: Settings
    api: PrefectApi
    deployment: str


def soak_settings(
    root: Path, bundle: Path, extra: dict[str, Any] | None = None
) -> tuple[Settings, dict[str, Any]]:
    """The tiny profile with every path under `root`, free ports, `bundle` and `extra`; and the
    overrides that made it (for the environment of everything `up` starts)."""
    overrides = isolated_paths(root)
    overrides["paths"]["data_dir"] = str(bundle)
    overrides["services"].update(prefect_port=free_port(), mlflow_port=free_port())
    mlflow_port = overrides["services"]["mlflow_port"]
    overrides["mlflow"] = {"tracking_uri": f"http://127.0.0.1:{mlflow_port}"}
    overrides = deep_merge(overrides, extra or {})
    return load_settings(PROFILE, overrides), overrides


@contextmanager
def soak_stack(settings: Settings, overrides: dict[str, Any]) -> Iterator[SoakStack]:
    """`up` with this process's environment naming the soak's settings only, so that the
    services, the flow runs (whose environment is the worker's) and the CLI all use them (a
    nightly run has no parameters: the profile comes from DEEPSUMMIT_PROFILE); `down` and the
    environment as it was afterwards."""
    saved = dict(os.environ)
    for name in [n for n in os.environ if n.startswith(("PREFECT_", "DEEPSUMMIT_"))]:
        del os.environ[name]
    os.environ.update(as_environment(overrides))
    os.environ["DEEPSUMMIT_PROFILE"] = PROFILE
    try:
        services.up(settings, STARTUP_TIMEOUT_S)
        os.environ.update(services.prefect_env(settings))  # the secret `up` generated
        api = services.prefect_api(settings)
        yield SoakStack(settings, api, api.get("/deployments/name/summit/train")["id"])
    finally:
        services.down(settings)
        os.environ.clear()
        os.environ.update(saved)


@dataclass
class Soak:
    """Nights in a row on one stack, each judged by its digests against the night before's
    and against a clean load of the same bundle; each night's row printed as it ends."""

    stack: SoakStack
    clean: Digests  # what a clean load of the soak's bundle leaves (soak_digests.clean_load)
    outage_s: float  # how long a killed service stays down
    timeout_s: float  # how long a run may take to finish
    drop_cache: bool = True  # as a night with new data: every stage computes again
    nights: list[Night] = field(default_factory=list)
    last: Digests = field(default_factory=lambda: Digests({}, {}, {}, frozenset(), ""))

    def night(self, target: str, delay_s: float) -> Night:
        """The next night, killing `target` `delay_s` after its run starts (NO_KILL: none)."""
        if self.drop_cache:  # so that a kill lands in real work, not in a cached stage
            shutil.rmtree(result_storage(self.stack.settings.paths), ignore_errors=True)
        night = Night(len(self.nights), target, delay_s)
        _run_night(self.stack, night, self.outage_s, self.timeout_s)
        after = take_digests(self.stack.settings)
        night.verdicts = judge(self.last, after, self.clean)
        trained = "COMPLETED" in night.children.values()
        night.failures += failures(night.verdicts, after, self.clean, night.state, trained)
        self.last = after
        self.nights.append(night)
        print(night_row(night), flush=True)
        return night


def _run_night(stack: SoakStack, night: Night, outage_s: float, timeout_s: float) -> Night:
    """One nightly run: the kill `night` drew (none for NO_KILL), `up` after `outage_s` where it
    hit, the run's final state, and the seconds from its start to its end. Returns once the
    run's child flow runs (its training) have ended too and no process of any of them is left,
    so that nothing writes while the digests are taken."""
    api = stack.api
    # With a key of its own, so that a busy server's transient answer (a 503) is asked again
    # rather than ending the soak: the server makes one run for one key.
    create = {"idempotency_key": f"soak-night-{uuid.uuid4()}"}
    flow_run = api.post(f"/deployments/{stack.deployment}/create_flow_run", create)["id"]
    running = _wait_for(lambda: _state(api, flow_run) not in ("SCHEDULED", "PENDING", None), 600)
    started = time.monotonic()
    if not running:
        night.killed = "nothing: the run never started"
    elif night.target == NO_KILL:
        night.killed = NO_KILL
    elif _wait_for(lambda: _state(api, flow_run) in FINAL_STATES, night.delay_s):
        night.killed = f"nothing: the run had finished before {night.delay_s:.0f} s"
    else:
        night.hit, night.killed = _kill(stack.settings, night.target, api, flow_run)
        if night.hit:
            time.sleep(outage_s)
            night.restored = _restore(stack.settings)
    night.state = _end(api, flow_run, timeout_s)
    night.seconds = time.monotonic() - started
    children = _children(api, flow_run)
    night.children = {name: _end(api, child, timeout_s) for name, child in children.items()}
    runs = [flow_run, *children.values()]
    if not _wait_for(lambda: _flow_run_process(runs)[0] is None, timeout_s):
        night.failures.append(f"a process of the night's runs outlived them by {timeout_s:.0f} s")
    return night


def _end(api: PrefectApi, flow_run: str, timeout_s: float) -> str:
    """The run's final state type, once it has one. A run still not ended after `timeout_s`
    is cancelled, so that the soak goes on (one left Running would hold the warehouse's slot,
    and every later night would queue behind it), and the state says so."""
    _wait_for(lambda: _state(api, flow_run) in FINAL_STATES, timeout_s)
    state = _state(api, flow_run) or "unknown (Prefect server not answering)"
    if state in FINAL_STATES:
        return state
    api.post(
        f"/flow_runs/{flow_run}/set_state",
        {"state": {"type": "CANCELLED", "name": "Cancelled"}, "force": True},
    )
    return f"{state} after {timeout_s:.0f} s (cancelled)"


def _children(api: PrefectApi, flow_run: str) -> dict[str, str]:
    """The flow runs `flow_run` started (its training on summit-train/local), name → id."""
    try:
        runs = api.post(
            "/flow_runs/filter", {"flow_runs": {"parent_flow_run_id": {"any_": [flow_run]}}}
        )
    except UNREACHABLE:  # the Prefect server is down (killed): as yet none known
        return {}
    return {run["name"]: run["id"] for run in runs}


def _state(api: PrefectApi, flow_run: str) -> str | None:
    """The run's state type; None while the server does not answer."""
    try:
        return api.get(f"/flow_runs/{flow_run}", timeout_s=10)["state_type"]
    except UNREACHABLE:
        return None


def _wait_for(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(1)
    return True


# ---------------------------------------------------------------- the kill


def _kill(settings: Settings, target: str, api: PrefectApi, flow_run: str) -> tuple[bool, str]:
    """SIGKILL the main process of `target`: whether it hit, and what was killed or why not.
    The stage process is the process of the run's training while one runs (a child flow run,
    a process of its own), else the run's own."""
    if target == STAGE_PROCESS:
        pid, killed_run = _flow_run_process([*_children(api, flow_run).values(), flow_run])
        where, expected = "environ", _run_marker(killed_run)
    else:
        pid = services.recorded_pid(settings, target)
        where, expected = "cmdline", COMMANDS[target].encode()
    if pid is None:
        return False, f"{target}: no process found"
    try:
        descriptor = os.pidfd_open(pid)
    except ProcessLookupError:
        return False, f"{target}: pid {pid} gone before the kill"
    try:
        # Read after the pidfd is open and checked alive after: the PID cannot have passed to
        # another process in between, so what /proc showed is the process the pidfd holds.
        matches = expected in _proc(pid, where).replace(b"\0", b" ")
        if _exited(descriptor, 0):
            return False, f"{target}: pid {pid} gone before the kill"
        if not matches:
            return False, f"{target}: pid {pid} is not the one expected ({expected.decode()})"
        signal.pidfd_send_signal(descriptor, signal.SIGKILL)
        died = _exited(descriptor, DEATH_TIMEOUT_S)
    finally:
        os.close(descriptor)
    reap(pid)  # the services are this process's children: no zombie left for `up` to see
    if not died:
        return False, f"{target} (pid {pid}) still alive {DEATH_TIMEOUT_S:.0f} s after SIGKILL"
    return True, f"{target} (pid {pid})"


def _exited(descriptor: int, timeout_s: float) -> bool:
    """Whether the process of a pidfd has exited (its descriptor turns readable), waiting up to
    `timeout_s`."""
    poller = select.poll()
    poller.register(descriptor, select.POLLIN)
    return bool(poller.poll(timeout_s * 1000))


def _proc(pid: int, name: str) -> bytes:
    try:
        return (Path("/proc") / str(pid) / name).read_bytes()
    except OSError:
        return b""


def _run_marker(flow_run: str) -> bytes:
    return f"PREFECT__FLOW_RUN_ID={flow_run}".encode()


def _flow_run_process(flow_runs: list[str]) -> tuple[int | None, str]:
    """The process the worker started for the first of `flow_runs` that has one (its
    environment names the run; its parent's does not), and that run; None and the last run
    where none has."""
    for flow_run in flow_runs:
        marker = _run_marker(flow_run)
        parents = {}
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                if marker in (proc / "environ").read_bytes().split(b"\0"):
                    stat = (proc / "stat").read_text()
                    parents[int(proc.name)] = int(stat.rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
        if top := [pid for pid, parent in parents.items() if parent not in parents]:
            return min(top), flow_run
    return None, flow_runs[-1]


def _restore(settings: Settings) -> str:
    """`deepsummit up`: start what is not running; what it did to the services."""
    try:
        lines = services.up(settings, STARTUP_TIMEOUT_S)
    except ServiceUnavailable as error:
        return f"up failed: {error}"
    done = [
        line
        for line in lines
        if line.startswith(services.SERVICE_NAMES) and not line.endswith("already running")
    ]
    return "; ".join(done) or "nothing to restart"


# ---------------------------------------------------------------- the report

HEADER = f"{'night':>5}  {'kill at':>8}  {'killed':<44}  {'final state':<12} {'time':>6}"


def night_row(night: Night) -> str:
    """One night: what was killed and when, how the run ended, and what the digests showed."""
    kill_at = "-" if night.target == NO_KILL else f"{night.delay_s:.0f} s"
    lines = [
        f"{night.number:>5}  {kill_at:>8}  {night.killed:<44}  {night.state:<12} "
        f"{night.seconds:>4.0f} s"
    ]
    if night.restored:
        lines.append(f"{'':>17}up: {night.restored}")
    if night.children:
        ended = ", ".join(f"{name} {state}" for name, state in night.children.items())
        lines.append(f"{'':>17}its child runs: {ended}")
    lines += [f"{'':>17}{item}: {verdict}" for item, verdict in night.verdicts.items()]
    lines += [f"{'':>17}FAIL {failure}" for failure in night.failures]
    return "\n".join(lines)
