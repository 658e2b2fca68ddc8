"""`prefect deployment run summit/train` with its training on another machine, on the
production backends (the Prefect server and MLflow on PostgreSQL, MLflow serving the artifacts):
the data worker (`deepsummit up`'s, in the checkout) runs ingest, weather and features; a
training worker on the `gpu` pool, in namespaces of its own (tests/remote_worker.py: its own
code copy, HOME and var/, the checkout and the stack's folder hidden from it), trains and
registers. Nothing crosses between them but the Prefect and MLflow servers: the snapshot goes by
URI, the report comes back the same way. Then `predict` answers from the version the second
worker registered. Then that training worker's machine dies in a second chain's training: the
chain notices its heartbeats stopped, marks the run Crashed, says so in one line and starts the
training again, which a worker on a third machine takes and resumes from the uploaded
checkpoint."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from e2e.stack import TREE_BUDGETS, Stack
from mlflow import MlflowClient
from prefect.client.orchestration import get_client
from prefect.settings import temporary_settings
from remote_worker import Worker, can_isolate, create_pool, remote_worker
from services_fixtures import exited, free_port

from deepsummit.contracts.champion import champion_version
from deepsummit.core.sections import MlflowConfig
from deepsummit.flows.summit import LINEAGE_ARTIFACT
from deepsummit.flows.training import WORKER_NAME_LABEL
from deepsummit.services import postgres
from deepsummit.services import supervisor as services
from deepsummit.train.checkpoint_store import TAG_UPLOADED, checkpoints_experiment

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.long,
    pytest.mark.timeout(900),
    pytest.mark.needs_machine("isolated workers", can_isolate()),
    pytest.mark.needs_machine("PostgreSQL", postgres.unavailable()),
]

GPU_POOL = "gpu"  # the pool the training deployment of prefect.yaml runs on
TRAINING_DEPLOYMENT = "summit-train/gpu"
HEARTBEAT_S = 2  # the training workers' PREFECT_WORKER_HEARTBEAT_SECONDS (the product's 30)
# Five missed heartbeats: a busy machine delays one, not five.
WORKER_LOST_S = 10


@dataclass
class TwoWorkers:
    stack: Stack
    remote: Worker
    remote_root: Path
    chain_run: str
    chain_s: float  # from `prefect deployment run` to the registered version
    worker_env: dict[str, str]  # a training worker's Prefect settings
    worker_settings: dict[str, Any]  # and its DeepSummit settings


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoWorkers]:
    stack = Stack(
        tmp_path_factory.mktemp("data-side"),
        {
            "train": {"deployment": TRAINING_DEPLOYMENT, "worker_lost_s": WORKER_LOST_S},
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
            worker_env = {k: v for k, v in prefect.items() if k.startswith("PREFECT_API")} | {
                "PREFECT_WORKER_HEARTBEAT_SECONDS": str(HEARTBEAT_S),
                # The training's own lines (its resume) in its flow run's logs.
                "PREFECT_LOGGING_EXTRA_LOGGERS": "deepsummit",
            }
            worker_settings = {
                "mlflow": {"tracking_uri": stack.settings.mlflow.tracking_uri},
                "baselines": TREE_BUDGETS,  # the training machine's own settings, as the stack's
            }
            with remote_worker(
                GPU_POOL, remote_root, worker_env, worker_settings, hidden=[stack.root]
            ) as remote:
                remote.wait_online(client)
                started = time.monotonic()
                chain_run = stack.trigger()
                chain_s = time.monotonic() - started
                yield TwoWorkers(
                    stack, remote, remote_root, chain_run, chain_s, worker_env, worker_settings
                )
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


# A training worker lost: the second chain trains longer (a new training, its features cached),
# so that it is still training when its first checkpoint is uploaded.
LOST_MAX_EPOCHS = 6
UPLOAD_TIMEOUT_S = 300
# From the kill to the chain's end: noticing the loss and training again from the checkpoint.
# Without the chain's check it waits for ever; this bound makes that a failure.
RESUMED_CHAIN_TIMEOUT_S = 300
LOST_LINE = re.compile(
    r"^train: flow run (\S+) lost its worker (\S+) \(no heartbeat for (\d+) s\); "
    r"started again as flow run (\S+)$"
)
RESUMED_LINE = re.compile(r"resuming from runs:/\S+ after epoch (\d+)")


@dataclass
class LostWorker:
    stack: Stack
    chain_run: dict[str, Any]
    killed_after_epoch: int
    lost_worker: str


def uploaded_epoch(config: MlflowConfig) -> int:
    """The newest epoch a training in progress has uploaded a checkpoint of; 0 before the
    first (a registered training's uploads are deleted)."""
    client = MlflowClient(config.tracking_uri)
    experiment = client.get_experiment_by_name(checkpoints_experiment(config))
    if experiment is None:
        return 0
    tags = [
        run.data.tags.get(TAG_UPLOADED) for run in client.search_runs([experiment.experiment_id])
    ]
    return max((json.loads(tag)["epoch"] for tag in tags if tag), default=0)


def wait_uploaded(config: MlflowConfig) -> int:
    deadline = time.monotonic() + UPLOAD_TIMEOUT_S
    while (epoch := uploaded_epoch(config)) < 1:
        if time.monotonic() > deadline:
            raise AssertionError(f"no checkpoint uploaded in {UPLOAD_TIMEOUT_S} s")
        time.sleep(0.5)
    return epoch


@pytest.fixture(scope="module")
def lost_worker(
    two_workers: TwoWorkers, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LostWorker]:
    """After the first chain: a second one, whose training worker's machine dies (SIGKILL to its
    namespace, which takes the flow run with it; nobody tells the server, which keeps the run
    RUNNING) once the first checkpoint is up; then a worker on another machine starts."""
    stack = two_workers.stack
    assert stack.wait_finished(two_workers.chain_run)["state_type"] == "COMPLETED"
    overrides = json.dumps({"train": {"max_epochs": LOST_MAX_EPOCHS}})
    chain_run = stack.trigger(f"overrides={overrides}", watch=False)
    epoch = wait_uploaded(stack.settings.mlflow)
    first = two_workers.remote
    first.process.kill()
    first.process.wait(timeout=30)
    with remote_worker(
        GPU_POOL,
        tmp_path_factory.mktemp("third-machine"),
        two_workers.worker_env,
        two_workers.worker_settings,
        hidden=[stack.root],
        hostname="machine-b",
    ):
        ended = stack.wait_finished(chain_run, timeout_s=RESUMED_CHAIN_TIMEOUT_S)
        yield LostWorker(stack, ended, epoch, first.hostname)


def test_a_lost_training_worker_is_said_in_one_line_and_the_chain_completes(
    lost_worker: LostWorker,
) -> None:
    stack, chain_run = lost_worker.stack, lost_worker.chain_run
    assert chain_run["state_type"] == "COMPLETED", chain_run["state"]
    [line] = stack.log_messages(chain_run["id"], "lost its worker")
    match = LOST_LINE.match(line)
    assert match, line
    lost, worker, silent_s, restarted = match.groups()
    assert worker == lost_worker.lost_worker and int(silent_s) >= WORKER_LOST_S
    runs = stack.training_runs(chain_run["id"])
    assert set(runs) == {lost, restarted}
    assert runs[lost]["state_type"] == "CRASHED"
    assert f"lost its worker {worker}" in runs[lost]["state"]["message"]
    assert runs[restarted]["state_type"] == "COMPLETED"
    assert runs[restarted]["labels"][WORKER_NAME_LABEL] == "machine-b"
    assert runs[restarted]["parameters"] == runs[lost]["parameters"]


def test_the_restarted_training_resumes_from_the_lost_ones_checkpoint_and_registers(
    lost_worker: LostWorker,
) -> None:
    stack = lost_worker.stack
    [restarted] = [
        run
        for run in stack.training_runs(lost_worker.chain_run["id"]).values()
        if run["state_type"] == "COMPLETED"
    ]
    resumed = [
        int(match.group(1))
        for line in stack.log_messages(restarted["id"], "resuming from")
        if (match := RESUMED_LINE.search(line))
    ]
    # At least from the upload seen before the kill (none came after it).
    assert resumed and lost_worker.killed_after_epoch <= resumed[0] <= LOST_MAX_EPOCHS, resumed
    # A version of the registered model comes from the restarted run (the gate decides whether
    # it is the champion).
    config = stack.settings.mlflow
    client = MlflowClient(config.tracking_uri)
    trained_by = {
        client.get_run(version.run_id).data.tags.get("prefect.flow_run_id")
        for version in client.search_model_versions(f"name = '{config.registered_model}'")
    }
    assert restarted["id"] in trained_by


def test_down_stops_postgresql_after_the_servers(two_workers: TwoWorkers) -> None:
    """Last in this module: `deepsummit down` stops the cluster too, and nothing of it runs."""
    stack = two_workers.stack
    pid = int(json.loads((stack.settings.services.run_dir / "postgres.pid").read_text())["pid"])
    lines = stack.cli("down").splitlines()
    assert lines[-1].startswith("postgres: ")  # after the servers it serves
    assert exited(pid)
    assert not postgres.healthy(stack.settings)
