"""A GPU host added as docs/deployment.md says ("Adding a GPU host"), its steps in its order, on
two hosts made on one machine (tests/two_hosts.py): a data host and a training host, each with
a network namespace of its own, joined by a veth pair, each worker in mount, PID and UTS
namespaces of its own besides (tests/remote_worker.py); steps 1 to 7 by tests/gpu_host.py, which
bench/two_workers.py --hosts runs the real chain on.

The data host runs Prefect (its login, `up`'s command) and MLflow (its basic-auth app, taking
only the Host name DATA_HOST) on its own address, and the data worker. The training host knows
that address by name only (a hosts file bound over its /etc/hosts) and its worker holds what a
real one holds: the two servers' URLs, the two logins and its own copy of the package, from its
environment; nothing of the data host's folders, no loopback shortcut. The chain's hand-over
runs across, and MLflow refuses a foreign Host header or a request without the login. And what a
deployment on the GPU host's pool needs from prefect.yaml: a module entrypoint that pulls
nothing.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from flows_fixtures import isolated_paths
from gpu_host import (
    DATA_POOL,
    GPU_POOL,
    MLFLOW_NAME,
    MLFLOW_PORT,
    MLFLOW_URL,
    PIPELINE,
    PREFECT_PORT,
    PREFECT_URL,
    SEARCH,
    gpu_host_added,
    mlflow_status,
)
from prefect.client.orchestration import SyncPrefectClient
from remote_worker import (
    CHECKOUT_STEP,
    QUIET,
    WORKER_CODE_STEP,
    Worker,
    can_isolate,
    check_elsewhere,
    check_handed_over,
    data_side_file,
    deploy_probes,
    run_all,
)
from two_hosts import (
    DATA_ADDRESS,
    NETNS_DIR,
    OUTSIDE_ADDRESS,
    TRAINING_ADDRESS,
    Hosts,
    can_network,
    inside,
    two_hosts,
)

from deepsummit.core.config import Settings
from deepsummit.core.sections import PROJECT_DIR_VARIABLE, PROJECT_ROOT
from deepsummit.services import health
from deepsummit.services import supervisor as services

pytestmark = [
    pytest.mark.needs_machine("an isolated worker", can_isolate()),
    pytest.mark.needs_machine("network namespaces", can_network()),
]

# What a flow run on either host tries: MLflow by name with its login; the servers' ports on its
# own loopback; an address outside the machine.
URLS = [
    MLFLOW_URL + SEARCH,
    f"http://127.0.0.1:{MLFLOW_PORT}/health",
    f"http://127.0.0.1:{PREFECT_PORT}/api/health",
    f"http://{OUTSIDE_ADDRESS}/",
]


@dataclass
class TwoHosts:
    settings: Settings  # the data host's
    client: SyncPrefectClient
    hosts: Hosts
    data: Worker
    remote: Worker
    data_root: Path
    data_file: Path  # a file of the data side's var/


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoHosts]:
    """Steps 1 to 7 (tests/gpu_host.py), then step 8: the probes' deployments."""
    data_root = tmp_path_factory.mktemp("data-host")
    remote_root = tmp_path_factory.mktemp("training-host")
    data_file = data_side_file(data_root)
    with gpu_host_added(isolated_paths(data_root), remote_root) as added:
        data, remote = added.data, added.remote
        print(f"online after {data.started_s:.1f} s (data), {remote.started_s:.1f} s (training)")
        # Step 8: the deployments. The GPU one names the tracking server as the GPU host knows
        # it, which the checked worker takes: its own.
        deploy_probes(added.client, DATA_POOL, CHECKOUT_STEP)
        named = {"env": {"DEEPSUMMIT_MLFLOW__TRACKING_URI": MLFLOW_URL}}
        deploy_probes(added.client, GPU_POOL, WORKER_CODE_STEP, named)
        yield TwoHosts(
            added.settings, added.client, added.hosts, data, remote, data_root, data_file
        )


def test_mlflow_refuses_a_foreign_host_or_no_login_and_prefect_no_login(two: TwoHosts) -> None:
    """Step 9's checks, from the GPU host's network: MLflow answers its name with the login
    only; Prefect the login only."""
    with inside(two.hosts.training):
        assert mlflow_status(MLFLOW_NAME, PIPELINE) == 200
        assert mlflow_status(MLFLOW_NAME, None) == 401
        # A Host header it was not told to take: another name, or the bare address.
        for foreign in ("attacker.example:5000", f"{DATA_ADDRESS}:{MLFLOW_PORT}", "localhost:5000"):
            assert mlflow_status(foreign, PIPELINE) == 403, foreign
        # Prefect: a request without the login refused (401), one with it taken; else it raises.
        health.check_prefect_auth(two.settings)
    log = services.log_file(two.settings, services.MLFLOW_SERVER).read_text()
    assert re.search(rf"{re.escape(TRAINING_ADDRESS)}:\d+ - \"GET {re.escape(SEARCH)} \S+ 401", log)


def test_the_chain_hands_over_to_the_training_host_by_name_alone(two: TwoHosts) -> None:
    """Step 9's run: the chain's hand-over, started on the data host, runs its child on the
    GPU host."""
    paths = [str(two.data_file), str(PROJECT_ROOT / "pyproject.toml")]
    child = f"where-am-i/{GPU_POOL}"
    (parent,) = run_all(
        two.client, (f"hand-over/{DATA_POOL}", {"deployment": child, "paths": paths, "urls": URLS})
    )

    here = parent["here"]
    assert here["hostname"] == two.data.hostname and set(here["reads"].values()) == {"read"}
    assert here["cwd"] == str(PROJECT_ROOT)  # the data host's worker runs the checkout
    facts = check_handed_over(two.client, parent, two.remote)
    check_elsewhere(facts, two.remote, paths)
    # It reached MLflow by name with the login of its environment; nothing of the data host
    # answers on its loopback, and no route leads off the machine.
    assert facts["reaches"] == {
        URLS[0]: "200",
        URLS[1]: "ECONNREFUSED",
        URLS[2]: "ECONNREFUSED",
        URLS[3]: "ENETUNREACH",
    }
    # The server saw it come from the training host's address.
    log = services.log_file(two.settings, services.MLFLOW_SERVER).read_text()
    assert re.search(rf'{re.escape(TRAINING_ADDRESS)}:\d+ - "GET {re.escape(SEARCH)} \S+ 200', log)
    # All it was told: the servers by name and the two logins; no folder of the data host.
    environment = facts["environment"]
    assert environment["PREFECT_API_URL"] == PREFECT_URL
    assert environment["DEEPSUMMIT_MLFLOW__TRACKING_URI"] == MLFLOW_URL
    assert facts["logins"] == [
        "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_USERNAME", "PREFECT_API_AUTH_STRING"
    ]  # fmt: skip
    told = " ".join(environment.values())
    assert str(two.data_root) not in told and str(PROJECT_ROOT) not in told
    assert DATA_ADDRESS not in told and "127.0.0.1" not in told


ON_GPU_POOL = {"work_pool": {"name": GPU_POOL, "work_queue_name": "default"}}
# A project file like prefect.yaml: the pull step names the project folder, and `file`, like
# each deployment that runs a file of the project, inherits it; `module` imports the flow from
# the package the worker's Python has, and pulls nothing.
PROBE_PROJECT = {
    "name": "remote-probe",
    "pull": [WORKER_CODE_STEP],
    "deployments": [
        {"name": "file", "entrypoint": "tests/remote_worker.py:where_am_i", **ON_GPU_POOL},
        {"name": "module", "entrypoint": "remote_worker.where_am_i", "pull": [], **ON_GPU_POOL},
    ],
}


def test_prefect_deploy_pins_a_file_entrypoint_to_the_deployers_folder_not_a_module_one(
    two: TwoHosts, tmp_path: Path
) -> None:
    """What a deployment on the GPU host's pool needs from prefect.yaml: `prefect deploy`, run
    on the data host as `deepsummit up` runs it (DEEPSUMMIT_PROJECT_DIR = the checkout), fills
    the pull step's placeholder in with the deployer's folder, which the GPU host does not have;
    a module entrypoint that pulls nothing runs the GPU host's own code."""
    project = tmp_path / "prefect.yaml"
    project.write_text(yaml.safe_dump(PROBE_PROJECT))
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "DEEPSUMMIT_"))}
    login = {
        k: v for k, v in services.prefect_env(two.settings).items() if k.startswith("PREFECT_API")
    }
    deployer = {**clean, **QUIET, **login, PROJECT_DIR_VARIABLE: str(PROJECT_ROOT)}
    deploy = ["prefect", "--no-prompt", "deploy", "--prefect-file", str(project), "--all"]
    deployed = subprocess.run(  # from this thread: in the data host's network
        [sys.executable, "-m", *deploy],
        cwd=PROJECT_ROOT,
        env=deployer,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr

    (step,) = two.client.read_deployment_by_name("where-am-i/file").pull_steps
    assert step == {
        "prefect.deployments.steps.set_working_directory": {"directory": str(PROJECT_ROOT)}
    }
    assert two.client.read_deployment_by_name("where-am-i/module").pull_steps == []
    (module,) = run_all(two.client, ("where-am-i/module", {"paths": []}))
    code = two.remote.root / "code"
    assert module["hostname"] == two.remote.hostname
    # It runs in a temporary folder of the worker, its package and settings from the worker's
    # own code (DEEPSUMMIT_PROJECT_DIR of the worker's environment).
    assert Path(module["cwd"]).is_relative_to(two.remote.root / "tmp")
    assert Path(module["package"]).is_relative_to(code) and module["project_root"] == str(code)


def test_the_hosts_are_gone_after_a_failure(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="a test failed"), two_hosts(tmp_path) as hosts:
        assert (NETNS_DIR / hosts.training.namespace).exists()
        raise RuntimeError("a test failed")
    assert not (NETNS_DIR / hosts.data.namespace).exists()
    assert not (NETNS_DIR / hosts.training.namespace).exists()
