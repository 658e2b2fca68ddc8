"""`prefect deployment run summit/train` with its training on another machine, on the
production backends (the Prefect server and MLflow on PostgreSQL, MLflow serving the artifacts):
the data worker (`deepsummit up`'s, in the checkout) runs ingest, weather and features; a
training worker on the `gpu` pool, in namespaces of its own (tests/remote_worker.py: its own
code copy, HOME and var/, the checkout and the stack's folder hidden from it), trains and
registers. Nothing crosses between them but the Prefect and MLflow servers: the snapshot goes by
URI, the report comes back the same way. Then `predict` answers from the version the second
worker registered."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from e2e.stack import Stack
from mlflow import MlflowClient
from prefect.client.orchestration import get_client
from prefect.settings import temporary_settings
from remote_worker import Worker, can_isolate, create_pool, remote_worker
from services_fixtures import free_port

from deepsummit.contracts.champion import champion_version
from deepsummit.flows.summit import LINEAGE_ARTIFACT
from deepsummit.services import postgres
from deepsummit.services import supervisor as services

WHY_NOT = can_isolate()
NO_POSTGRES = postgres.unavailable()
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(900),
    pytest.mark.skipif(WHY_NOT is not None, reason=f"no isolated worker: {WHY_NOT}"),
    pytest.mark.skipif(NO_POSTGRES is not None, reason=f"no PostgreSQL: {NO_POSTGRES}"),
]

GPU_POOL = "gpu"  # the pool the training deployment of prefect.yaml runs on
TRAINING_DEPLOYMENT = "summit-train/gpu"


@dataclass
class TwoWorkers:
    stack: Stack
    remote: Worker
    remote_root: Path
    chain_run: str
    chain_s: float  # from `prefect deployment run` to the registered version


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoWorkers]:
    stack = Stack(
        tmp_path_factory.mktemp("data-side"),
        {
            "train": {"deployment": TRAINING_DEPLOYMENT},
            "services": {"database": "postgresql", "postgres_port": free_port()},
        },
    )
    remote_root = tmp_path_factory.mktemp("training-side")
    try:
        stack.up()
        prefect = services.prefect_env(stack.settings)
        with temporary_settings(
            {"PREFECT_API_URL": prefect["PREFECT_API_URL"],
             "PREFECT_API_AUTH_STRING": prefect["PREFECT_API_AUTH_STRING"]}
        ), get_client(sync_client=True) as client:  # fmt: skip
            # The pool a GPU machine's worker serves, locked as `deepsummit up` locks its own;
            # then the deployments of prefect.yaml, as `up` applies them, now that it exists.
            create_pool(client, GPU_POOL)
            applied = services.deploy(stack.settings)
            assert TRAINING_DEPLOYMENT.split("/")[1] in applied[0].split(": ")[1].split(", ")
            client_env = {k: v for k, v in prefect.items() if k.startswith("PREFECT_API")}
            remote_settings = {"mlflow": {"tracking_uri": stack.settings.mlflow.tracking_uri}}
            with remote_worker(
                GPU_POOL, remote_root, client_env, remote_settings, hidden=[stack.root]
            ) as remote:
                remote.wait_online(client)
                started = time.monotonic()
                chain_run = stack.trigger()
                chain_s = time.monotonic() - started
                yield TwoWorkers(stack, remote, remote_root, chain_run, chain_s)
    finally:
        stack.cli("down")


def test_the_training_runs_on_the_other_worker_as_the_chains_child(
    two_workers: TwoWorkers,
) -> None:
    stack = two_workers.stack
    print(f"\ntwo-worker chain: {two_workers.chain_s:.1f} s to the registered version")
    assert stack.wait_finished(two_workers.chain_run)["state_type"] == "COMPLETED"
    training = stack.training_run(two_workers.chain_run)
    deployment = stack.get(f"/deployments/name/{TRAINING_DEPLOYMENT}")
    assert training["deployment_id"] == deployment["id"]
    assert deployment["work_pool_name"] == GPU_POOL and training["state_type"] == "COMPLETED"
    # The snapshot came by URI into the training worker's own folder; the data side fetched
    # nothing.
    fetched = two_workers.remote_root / "var/features/fetched"
    [copy] = [p for p in fetched.iterdir() if not p.name.startswith(".")]
    assert training["parameters"]["snapshot_uri"].startswith("runs:/")
    assert (copy / "preprocessing.json").is_file()
    assert not (stack.root / "var/features/fetched").exists()
    # The training worker logged its own flow run's pickup.
    assert training["id"] in two_workers.remote.log.read_text()


def test_the_version_is_registered_by_the_training_workers_flow_run(
    two_workers: TwoWorkers,
) -> None:
    stack = two_workers.stack
    training = stack.training_run(two_workers.chain_run)
    config = stack.settings.mlflow
    version = champion_version(config)
    run_id = (
        MlflowClient(config.tracking_uri)
        .get_model_version(config.registered_model, version.version)
        .run_id
    )
    tags = MlflowClient(config.tracking_uri).get_run(run_id).data.tags
    assert tags["prefect.flow_run_id"] == training["id"]
    artifacts = stack.post(
        "/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [two_workers.chain_run]}}}
    )
    (lineage,) = [a["data"] for a in artifacts if a["key"] == LINEAGE_ARTIFACT]
    assert f"flow run {training['name']}" in lineage


def test_predict_on_the_data_side_answers_from_that_version(two_workers: TwoWorkers) -> None:
    stack = two_workers.stack
    version = champion_version(stack.settings.mlflow).version
    output = stack.cli("predict", "--peak", "KANG", "--push-date", "2015-05-10", "--age", "35")
    assert re.search(r"P\(summit\) = 0\.\d+", output), output
    assert f"deepsummit@champion (v{version}," in output, output


def remote_lines(worker: Worker, pattern: str) -> list[str]:
    return [line for line in worker.log.read_text().splitlines() if re.search(pattern, line)]


def test_the_training_worker_never_saw_the_data_sides_folder(two_workers: TwoWorkers) -> None:
    """Its var/ holds only what came by URI; the data side's warehouse is not in its log."""
    remote_var = two_workers.remote_root / "var"
    assert not list(remote_var.rglob("*.duckdb"))
    assert not remote_lines(two_workers.remote, str(two_workers.stack.root))


def test_the_servers_keep_their_records_in_postgresql(two_workers: TwoWorkers) -> None:
    """The chain's flow runs are rows of the Prefect server's PostgreSQL database, the model
    version a row of MLflow's, and no SQLite file of either was made."""
    settings = two_workers.stack.settings
    flow_runs = postgres.sql(
        settings, f"SELECT count(*) FROM flow_run WHERE id = '{two_workers.chain_run}'", "prefect"
    )
    versions = postgres.sql(settings, "SELECT count(*) FROM model_versions", "mlflow")
    assert int(flow_runs) == 1 and int(versions) >= 1
    assert not list(two_workers.stack.root.rglob("*.db"))


def test_down_stops_postgresql_after_the_servers(two_workers: TwoWorkers) -> None:
    """Last in this module: `deepsummit down` stops the cluster too, and nothing of it runs."""
    stack = two_workers.stack
    pid = int(json.loads((stack.settings.services.run_dir / "postgres.pid").read_text())["pid"])
    lines = stack.cli("down").splitlines()
    assert lines[-1].startswith("postgres: ")  # after the servers it serves
    assert not Path(f"/proc/{pid}").exists() or _zombie(pid)
    assert not postgres.healthy(stack.settings)


def _zombie(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
