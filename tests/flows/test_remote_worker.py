"""Two Prefect workers that share no folder: the data worker in the checkout and a training
worker on a machine of its own (tests/remote_worker.py). A flow run on the training worker
cannot read the checkout or the data side's var/, runs the training worker's own copy of the
code, and still appears as the child of the flow run on the data worker that started it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from flows_fixtures import isolated_paths, migrated_prefect_harness
from prefect.client.orchestration import SyncPrefectClient, get_client
from prefect.settings import PREFECT_API_URL
from remote_worker import (
    CHECKOUT_STEP,
    QUIET,
    WORKER_CODE_STEP,
    Worker,
    can_isolate,
    check_elsewhere,
    check_handed_over,
    create_pool,
    data_side_file,
    data_worker,
    deploy_probes,
    remote_worker,
    run_all,
)

from deepsummit.core.sections import PROJECT_DIR_VARIABLE, PROJECT_ROOT

pytestmark = pytest.mark.needs_machine("an isolated worker", can_isolate())

DATA_POOL, REMOTE_POOL = "data", "train-remote"


@dataclass
class TwoWorkers:
    client: SyncPrefectClient
    prefect: dict[str, str]  # the server's address, for a `prefect` command
    data: Worker
    remote: Worker
    data_file: Path  # a file of the data side's var/
    checkout_file: Path  # a file of the checkout


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoWorkers]:
    data_root = tmp_path_factory.mktemp("data-side")
    remote_root = tmp_path_factory.mktemp("remote-side")
    data_file = data_side_file(data_root)
    with (
        migrated_prefect_harness(),
        get_client(sync_client=True) as client,
    ):
        prefect = {"PREFECT_API_URL": PREFECT_API_URL.value()}
        for pool, pull in ((DATA_POOL, CHECKOUT_STEP), (REMOTE_POOL, WORKER_CODE_STEP)):
            create_pool(client, pool)
            deploy_probes(client, pool, pull)
        settings = isolated_paths(data_root)
        with (
            data_worker(
                DATA_POOL, prefect, settings, [remote_root], data_root / "worker.log"
            ) as data,
            remote_worker(REMOTE_POOL, remote_root, prefect, {}, [data_root]) as remote,
        ):
            for worker in (data, remote):
                worker.wait_online(client)
            print(f"online after {data.started_s:.1f} s (data), {remote.started_s:.1f} s (remote)")
            prefect_env = {**QUIET, **prefect}
            yield TwoWorkers(
                client, prefect_env, data, remote, data_file, PROJECT_ROOT / "pyproject.toml"
            )


def test_a_flow_run_on_the_remote_worker_cannot_read_the_checkout_or_its_var(
    workers: TwoWorkers,
) -> None:
    paths = [str(workers.data_file), str(workers.checkout_file)]
    data, remote = run_all(
        workers.client,
        (f"where-am-i/{DATA_POOL}", {"paths": paths}),
        (f"where-am-i/{REMOTE_POOL}", {"paths": paths}),
    )

    assert data["reads"] == {path: "read" for path in paths}
    assert data["cwd"] == str(PROJECT_ROOT)
    assert data["hostname"] == data["worker"] == workers.data.hostname
    check_elsewhere(remote, workers.remote, paths)


def test_a_run_started_on_the_data_worker_runs_on_the_remote_worker_as_its_child(
    workers: TwoWorkers,
) -> None:
    paths = [str(workers.data_file)]
    remote = f"where-am-i/{REMOTE_POOL}"
    (parent,) = run_all(
        workers.client, (f"hand-over/{DATA_POOL}", {"deployment": remote, "paths": paths})
    )

    here = parent["here"]
    assert here["hostname"] == workers.data.hostname and here["reads"] == {paths[0]: "read"}
    # It ran elsewhere, as the parent's child, which cannot read its result.
    facts = check_handed_over(workers.client, parent, workers.remote)
    check_elsewhere(facts, workers.remote, paths)


ON_REMOTE_POOL = {"work_pool": {"name": REMOTE_POOL, "work_queue_name": "default"}}
# A project file like prefect.yaml: the pull step names the project folder, and `file`, like
# each deployment that runs a file of the project, inherits it; `module` imports the flow from
# the package the worker's Python has, and pulls nothing.
PROBE_PROJECT = {
    "name": "remote-probe",
    "pull": [WORKER_CODE_STEP],
    "deployments": [
        {"name": "file", "entrypoint": "tests/remote_worker.py:where_am_i", **ON_REMOTE_POOL},
        {"name": "module", "entrypoint": "remote_worker.where_am_i", "pull": [], **ON_REMOTE_POOL},
    ],
}


def test_prefect_deploy_pins_a_file_entrypoint_to_the_deployers_folder_not_a_module_one(
    workers: TwoWorkers, tmp_path: Path
) -> None:
    """What a deployment on the remote pool needs from prefect.yaml: `prefect deploy`, run as
    `deepsummit up` runs it (DEEPSUMMIT_PROJECT_DIR = the checkout), fills the pull step's
    placeholder in with the deployer's folder, which a remote worker does not have; a module
    entrypoint that pulls nothing runs the worker's own code."""
    project = tmp_path / "prefect.yaml"
    project.write_text(yaml.safe_dump(PROBE_PROJECT))
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "DEEPSUMMIT_"))}
    deployer = {**clean, **workers.prefect, PROJECT_DIR_VARIABLE: str(PROJECT_ROOT)}
    deploy = ["prefect", "--no-prompt", "deploy", "--prefect-file", str(project), "--all"]
    deployed = subprocess.run(
        [sys.executable, "-m", *deploy],
        cwd=PROJECT_ROOT,
        env=deployer,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr

    client = workers.client
    (step,) = client.read_deployment_by_name("where-am-i/file").pull_steps
    assert step == {
        "prefect.deployments.steps.set_working_directory": {"directory": str(PROJECT_ROOT)}
    }
    assert client.read_deployment_by_name("where-am-i/module").pull_steps == []
    (module,) = run_all(workers.client, ("where-am-i/module", {"paths": []}))
    code = workers.remote.root / "code"
    assert module["hostname"] == workers.remote.hostname
    # It runs in a temporary folder of the worker, its package and settings from the worker's
    # own code (DEEPSUMMIT_PROJECT_DIR of the worker's environment).
    assert Path(module["cwd"]).is_relative_to(workers.remote.root / "tmp")
    assert Path(module["package"]).is_relative_to(code) and module["project_root"] == str(code)
