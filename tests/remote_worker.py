"""Prefect process workers as on machines of their own, for tests.

Each worker runs in new mount, PID and UTS namespaces (`unshare`; the tests run as root): the
folders of the other side are covered by empty tmpfs mounts, the other side's processes are not
in its /proc, its hostname is its own, and stopping it kills everything it started (the
namespace's first process takes the rest with it). Nothing on the host changes: the mounts live
and die with the namespace. The workers share the machine's network, unless given a `network`
of their own (tests/two_hosts.py): then a worker runs in that network namespace, its /etc/hosts
covered by that network's hosts file, as on another host.

- `data_worker`: the checkout's worker, as `deepsummit up` starts it: in the checkout, with the
  test's settings; it cannot see the remote worker's folder (so a result the remote worker
  stored on its own disk is out of reach, as on two machines).
- `remote_worker`: a training worker elsewhere: a temporary folder holding its own copy of the
  code, its own HOME and var/, and an environment with nothing but the Prefect server's address,
  the DEEPSUMMIT_* settings pointing into that folder and those the test adds (the MLflow
  server's address). The checkout, and with it the checkout's var/, is hidden; so is every folder
  the test names (the data side's var/). It runs the same Python environment, read-only, bound
  into its folder, because the checkout that may hold it is hidden.

A deployment the tests create finds the code on the remote worker by a pull step that names a
variable of the worker's own environment, `{{ $DEEPSUMMIT_PROJECT_DIR }}` (WORKER_CODE_STEP):
the flow-run process fills it in. `prefect deploy` fills the same placeholder in from the
deployer's environment where the deployer has it (as `deepsummit up` does), so a deployment of
prefect.yaml for a remote pool takes a module entrypoint and pulls nothing instead
(tests/flows/test_two_hosts.py shows both).

The probe flows `where_am_i` and `hand_over` are deployed by entrypoint
`tests/remote_worker.py:...`, so this module is loaded by the flow runs on either worker.
"""

from __future__ import annotations

import base64
import errno
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flows_fixtures import as_environment, isolated_paths
from prefect import flow
from prefect.client.orchestration import SyncPrefectClient
from prefect.client.schemas.actions import WorkPoolCreate
from prefect.client.schemas.objects import FlowRun, WorkerStatus
from prefect.deployments import run_deployment
from prefect.runtime import flow_run
from two_hosts import Network

import deepsummit
from deepsummit.core.sections import PROJECT_DIR_VARIABLE, PROJECT_ROOT
from deepsummit.services.local import PROCESS_JOB_TEMPLATE

# What a deployment's code copy needs: the package, the tests' flows and helpers, and the
# project files a run reads (deployments/, prefect.yaml, pyproject.toml).
CODE = ("src", "tests", "deployments", "prefect.yaml", "pyproject.toml")
# The pull step of a deployment that runs from the code copy of whichever worker picks it up.
WORKER_CODE_STEP = {
    "prefect.deployments.steps.set_working_directory": {
        "directory": f"{{{{ ${PROJECT_DIR_VARIABLE} }}}}"
    }
}
# The pull step of the data worker's deployments: they run in the checkout, as prefect.yaml's
# puts them once `prefect deploy` has filled DEEPSUMMIT_PROJECT_DIR in; a remote pool's run
# wherever the worker that picks them up keeps its code (WORKER_CODE_STEP).
CHECKOUT_STEP = {
    "prefect.deployments.steps.set_working_directory": {"directory": str(PROJECT_ROOT)}
}
# Set the hostname, bind a hosts file over /etc/hosts (the names this machine resolves), bind
# the Python environment into the worker's folder, cover each hidden folder with an empty tmpfs,
# then become the worker: args are hostname, hosts file, environment, its binding, hidden
# folders..., `--`, the command.
ENTER = """set -eu
hostname "$1"
if [ -n "$2" ]; then mount --bind "$2" /etc/hosts; fi
if [ -n "$3" ]; then mkdir -p "$4" && mount --bind "$3" "$4"; fi
shift 4
while [ "$1" != -- ]; do mount -t tmpfs -o size=1m,mode=0755 hidden "$1"; shift; done
shift
exec "$@"
"""
UNSHARE = ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "--uts",
           "--propagation", "private"]  # fmt: skip
# The variables the conftest sets for a quiet, offline run: a worker elsewhere sets them too.
QUIET = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
    "TQDM_DISABLE": "1",
}
ONLINE_TIMEOUT_S = 120.0
LOGINS = ("PREFECT_API_AUTH_STRING", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")
CHILD_TIMEOUT_S = 180.0  # hand_over's wait for its child (run_deployment's default: for ever)


def can_isolate() -> str | None:
    """Why a worker cannot be started in namespaces of its own here, or None when it can."""
    if os.geteuid() != 0:
        return "needs root for mount and PID namespaces (unshare)"
    if shutil.which("unshare") is None:
        return "no unshare command (util-linux)"
    probe = subprocess.run([*UNSHARE, "true"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        return f"unshare refused: {probe.stderr.strip()}"
    return None


@dataclass
class Worker:
    pool: str
    hostname: str  # also its name on the Prefect server
    root: Path  # the folder it runs in: the checkout, or the remote worker's own
    process: subprocess.Popen[bytes]
    log: Path
    spawned: float  # time.monotonic() when its process started
    started_s: float = 0.0  # from then to ONLINE on the server

    def wait_online(self, client: SyncPrefectClient) -> None:
        """Wait until the server counts this worker ONLINE; keep how long it took."""
        deadline = self.spawned + ONLINE_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"worker of {self.pool} exited: {self.log.read_text()[-2000:]}")
            workers = client.read_workers_for_work_pool(self.pool)
            if any(worker.status == WorkerStatus.ONLINE for worker in workers):
                self.started_s = time.monotonic() - self.spawned
                return
            time.sleep(0.2)
        raise TimeoutError(f"worker of {self.pool} not online: {self.log.read_text()[-2000:]}")


def create_pool(client: SyncPrefectClient, name: str) -> None:
    """A process pool with the locked job template `deepsummit up` gives its pools."""
    template = json.loads(PROCESS_JOB_TEMPLATE.read_text())
    client.create_work_pool(WorkPoolCreate(name=name, type="process", base_job_template=template))


@contextmanager
def _worker(
    pool: str,
    root: Path,
    log: Path,
    env: dict[str, str],
    hidden: list[Path],
    python: Path,
    python_binding: tuple[Path, Path] | None = None,
    hostname: str | None = None,
    network: Network | None = None,
) -> Iterator[Worker]:
    hostname = hostname or f"worker-{pool}"
    source, target = python_binding or ("", "")
    hosts = network.hosts if network else ""
    enter = [hostname, str(hosts), str(source), str(target), *map(str, hidden)]
    # The worker `deepsummit up` and the compose file start.
    command = [str(python), "-m", "deepsummit.services.checked_worker", "--pool", pool,
               "--name", hostname]  # fmt: skip
    namespaces = [*(network.enter() if network else []), *UNSHARE]
    spawned = time.monotonic()
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*namespaces, "sh", "-c", ENTER, "sh", *enter, "--", *command],
            cwd=root,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield Worker(pool, hostname, root, process, log, spawned)
    finally:
        # unshare --kill-child: SIGKILL to unshare kills the namespace's first process, and with
        # it the kernel kills the rest of the namespace (the worker's flow runs included). A
        # SIGTERM would reach the worker, which shields the first one.
        process.kill()
        process.wait(timeout=30)


def _prefect_client_env(prefect: dict[str, str]) -> dict[str, str]:
    """The worker's Prefect settings: the server and a poll each second (the product's 5 s
    would make every hand-over slower than it needs to be)."""
    return {**QUIET, **prefect, "PREFECT_WORKER_QUERY_SECONDS": "1"}


@contextmanager
def data_worker(
    pool: str,
    prefect: dict[str, str],
    overrides: dict[str, Any],
    hidden: list[Path],
    log: Path,
    network: Network,
) -> Iterator[Worker]:
    """The checkout's worker of `pool`: in the checkout, with this interpreter and the settings
    `overrides`, its output in `log`, in the data host's `network` (tests/two_hosts.py);
    `hidden` folders are empty to it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "DEEPSUMMIT_"))}
    env |= _prefect_client_env(prefect) | as_environment(overrides)
    env[PROJECT_DIR_VARIABLE] = str(PROJECT_ROOT)
    env["PYTHONPATH"] = os.pathsep.join(str(PROJECT_ROOT / p) for p in ("src", "tests"))
    with _worker(
        pool, PROJECT_ROOT, log, env, hidden, Path(sys.executable), network=network
    ) as worker:
        yield worker


def data_side_file(data_root: Path) -> Path:
    """A file where the data side keeps its warehouse (under its var/): what a flow run on the
    other side must not be able to read."""
    path = data_root / "var" / "warehouse.duckdb"
    path.parent.mkdir()
    path.write_bytes(b"the data side's warehouse")
    return path


def copy_code(dest: Path) -> Path:
    """The checkout's code as a worker elsewhere would hold it (the working tree, so that a
    test runs the code it is testing)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", ".pytest_cache")
    for name in CODE:
        source = PROJECT_ROOT / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=ignore)
        else:
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def remote_environment(
    root: Path, prefect: dict[str, str], overrides: dict[str, Any]
) -> dict[str, str]:
    """All a remote worker knows: where the Prefect server is, and settings that point into
    `root` (its code, HOME, temporary files and var/), plus the test's `overrides`."""
    from deepsummit.core.config import deep_merge

    settings = deep_merge(isolated_paths(root), overrides)
    return {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": str(root / "home"),
        "TMPDIR": str(root / "tmp"),
        "PYTHONPATH": f"{root / 'code/src'}{os.pathsep}{root / 'code/tests'}",
        PROJECT_DIR_VARIABLE: str(root / "code"),
        **_prefect_client_env(prefect),
        **as_environment(settings),
    }


@contextmanager
def remote_worker(
    pool: str,
    root: Path,
    prefect: dict[str, str],
    overrides: dict[str, Any],
    hidden: list[Path],
    hostname: str | None = None,
    network: Network | None = None,
) -> Iterator[Worker]:
    """A worker of `pool` as on another machine, in `root` (see the module docstring): the
    checkout and `hidden` are empty folders to it. `hostname` (also its worker name) tells two
    such machines of one pool apart; by default worker-<pool>. `network`: its own network, as
    another host's (tests/two_hosts.py), else the machine's."""
    copy_code(root / "code")
    for folder in ("home", "tmp"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    environment = Path(sys.prefix)  # the virtual environment, which the checkout may hold
    python = root / "python"
    env = remote_environment(root, prefect, overrides)
    interpreter = python / Path(sys.executable).relative_to(environment)
    with _worker(
        pool,
        root,
        root / "worker.log",
        env,
        [PROJECT_ROOT, *hidden],
        interpreter,
        python_binding=(environment, python),
        hostname=hostname,
        network=network,
    ) as worker:
        yield worker


def read_attempt(path: str) -> str:
    """'read' when the file can be read here, else the error's type."""
    try:
        Path(path).read_bytes()
    except OSError as error:
        return type(error).__name__
    return "read"


def basic_authorization(username: str, password: str) -> str:
    """The Authorization header of an HTTP basic-auth login."""
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()


def reach(url: str) -> str:
    """What `url` answers a GET with, sent with the MLflow login of this process's environment
    where it has one: the HTTP status, or the socket error's name (ECONNREFUSED: nothing listens
    there; ENETUNREACH: no route leads there)."""
    request = urllib.request.Request(url)
    login = [os.environ.get(f"MLFLOW_TRACKING_{part}", "") for part in ("USERNAME", "PASSWORD")]
    if all(login):
        request.add_header("Authorization", basic_authorization(*login))
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return str(response.status)
    except urllib.error.HTTPError as error:
        return str(error.code)
    except urllib.error.URLError as error:
        reason = error.reason
        return errno.errorcode.get(getattr(reason, "errno", None) or 0, type(reason).__name__)


@flow(name="where-am-i", persist_result=True)
def where_am_i(paths: list[str], urls: list[str] | None = None) -> dict[str, Any]:
    """Where this flow run executes, what it can read of `paths` and what `urls` answer it."""
    from deepsummit.core.config import load_settings

    return {
        "hostname": socket.gethostname(),
        "cwd": os.getcwd(),
        "home": str(Path.home()),
        "package": deepsummit.__file__,
        "project_root": str(PROJECT_ROOT),
        "var_dir": str(load_settings().paths.var_dir),
        "worker": os.environ.get("PREFECT__WORKER_NAME"),
        "reads": {path: read_attempt(path) for path in paths},
        "reaches": {url: reach(url) for url in urls or []},
        # Where its settings send it, and which logins it holds (by name: no secret goes into
        # a result).
        "environment": {
            name: value
            for name, value in os.environ.items()
            if name == "PREFECT_API_URL" or name.startswith("DEEPSUMMIT_")
        },
        "logins": sorted(name for name in LOGINS if name in os.environ),
    }


@flow(name="hand-over", persist_result=True)
def hand_over(deployment: str, paths: list[str], urls: list[str] | None = None) -> dict[str, Any]:
    """Run `deployment` as this flow run's child (as summit/train starts its training run),
    and say whether the child's result, stored where the child ran, is readable here."""
    parameters = {"paths": paths, "urls": urls or []}
    child: FlowRun = run_deployment(
        deployment, parameters=parameters, poll_interval=1, timeout=CHILD_TIMEOUT_S
    )
    assert child.state is not None
    try:
        child.state.result()
        child_result = "read"
    except Exception as error:  # what the chain would meet: say it, the test judges it
        child_result = f"{type(error).__name__}: {error}"
    return {
        "flow_run": flow_run.get_id(),
        "here": where_am_i.fn(paths, urls),
        "child": str(child.id),
        "child_state": child.state.name,
        "child_result": child_result,
    }


ENTRYPOINT = "tests/remote_worker.py"  # the probes' file, relative to any code copy


def deploy_probes(
    client: SyncPrefectClient,
    pool: str,
    pull: dict[str, Any],
    job_variables: dict[str, Any] | None = None,
) -> None:
    """where-am-i/<pool> and hand-over/<pool>: the probes on `pool`, run from the folder the
    pull step `pull` sets, with the deployment's `job_variables`."""
    for probe in (where_am_i, hand_over):
        client.create_deployment(
            flow_id=client.create_flow_from_name(probe.name),
            name=pool,
            work_pool_name=pool,
            entrypoint=f"{ENTRYPOINT}:{probe.fn.__name__}",
            pull_steps=[pull],
            job_variables=job_variables or {},
        )


def run_all(client: SyncPrefectClient, *runs: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Start a flow run of each (deployment, parameters) at once; their results once all
    have completed."""
    started = [
        client.create_flow_run_from_deployment(
            client.read_deployment_by_name(name).id, parameters=parameters
        )
        for name, parameters in runs
    ]
    results = []
    for started_run in started:
        run = wait_final(client, started_run.id)
        assert run.state is not None and run.state.is_completed(), run.state
        results.append(run.state.result())
    return results


def check_elsewhere(facts: dict[str, Any], remote: Worker, paths: list[str]) -> None:
    """`facts` (where_am_i's) are of a flow run on `remote`, on a machine of its own: none of
    `paths` readable, its own code copy, HOME, var/, hostname and worker name."""
    code = remote.root / "code"
    assert facts["reads"] == {path: "FileNotFoundError" for path in paths}
    assert facts["cwd"] == str(code)
    assert Path(facts["package"]).is_relative_to(code)  # its own copy of the code
    assert facts["project_root"] == str(code)
    assert facts["home"] == str(remote.root / "home")
    assert Path(facts["var_dir"]).is_relative_to(remote.root)
    assert facts["hostname"] == facts["worker"] == remote.hostname


def check_handed_over(
    client: SyncPrefectClient, parent: dict[str, Any], remote: Worker
) -> dict[str, Any]:
    """`parent` (hand_over's) started its child on `remote`'s pool as its child flow run, and
    could not read the child's result, stored on the remote worker's disk; the child's facts."""
    child = client.read_flow_run(parent["child"])
    assert child.work_pool_name == remote.pool and parent["child_state"] == "Completed"
    # A child flow run: the task run that stands for it belongs to the parent's flow run.
    assert child.parent_task_run_id is not None
    task_run = client.read_task_run(child.parent_task_run_id)
    assert str(task_run.flow_run_id) == parent["flow_run"]
    # Out of reach of the flow run that started it, as on two machines.
    assert parent["child_result"].startswith("ValueError")
    assert str(remote.root) in parent["child_result"]
    # ... and read here, from the remote worker's disk.
    assert child.state is not None
    return child.state.result()


def wait_final(client: SyncPrefectClient, flow_run_id: Any, timeout_s: float = 180) -> FlowRun:
    """The flow run once it has ended (completed, failed, crashed or cancelled)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run = client.read_flow_run(flow_run_id)
        if run.state is not None and run.state.is_final():
            return run
        time.sleep(0.5)
    raise TimeoutError(f"flow run {flow_run_id} still {run.state.name if run.state else None}")
