"""A training worker's machine dies mid-training (SIGKILL to its namespace: the worker and the
flow run it started die together, and nobody tells the Prefect server, which keeps the run
RUNNING). The chain notices the worker's heartbeats have stopped, marks the run Crashed, says so
in one line and starts the training deployment again; a second worker on another machine picks
it up, resumes from the checkpoint the first one uploaded, and registers the version."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from e2e.stack import Stack
from mlflow import MlflowClient
from prefect.client.orchestration import get_client
from prefect.settings import temporary_settings
from remote_worker import Worker, can_isolate, create_pool, remote_worker

from deepsummit.contracts.champion import champion_version
from deepsummit.core.sections import MlflowConfig
from deepsummit.flows.training import TRAINING_FLOW, WORKER_NAME_LABEL
from deepsummit.services import supervisor as services
from deepsummit.train.checkpoint_store import TAG_UPLOADED, checkpoints_experiment

WHY_NOT = can_isolate()
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(900),
    pytest.mark.skipif(WHY_NOT is not None, reason=f"no isolated worker: {WHY_NOT}"),
]

GPU_POOL = "gpu"
TRAINING_DEPLOYMENT = "summit-train/gpu"
HEARTBEAT_S = 2  # the workers' PREFECT_WORKER_HEARTBEAT_SECONDS (the product's 30)
WORKER_LOST_S = 6  # three missed heartbeats
# Enough epochs that the first training is still going when its first checkpoint is uploaded.
MAX_EPOCHS = 6
UPLOAD_TIMEOUT_S = 420  # ingest, weather and features, then the first epoch
# From the kill to the chain's end: detecting the loss and training again from the checkpoint.
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
    first: Worker
    second: Worker
    chain_run: dict[str, Any]
    killed_after_epoch: int
    kill_to_end_s: float


def uploaded_epoch(config: MlflowConfig) -> int:
    """The newest epoch any training has uploaded a checkpoint of; 0 before the first."""
    client = MlflowClient(config.tracking_uri)
    experiment = client.get_experiment_by_name(checkpoints_experiment(config))
    if experiment is None:
        return 0
    runs = client.search_runs([experiment.experiment_id])
    tags = [run.data.tags.get(TAG_UPLOADED) for run in runs]
    return max((json.loads(tag)["epoch"] for tag in tags if tag), default=0)


def wait_uploaded(config: MlflowConfig) -> int:
    deadline = time.monotonic() + UPLOAD_TIMEOUT_S
    while (epoch := uploaded_epoch(config)) < 1:
        if time.monotonic() > deadline:
            raise AssertionError(f"no checkpoint uploaded in {UPLOAD_TIMEOUT_S} s")
        time.sleep(0.5)
    return epoch


@pytest.fixture(scope="module")
def lost_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LostWorker]:
    stack = Stack(
        tmp_path_factory.mktemp("data-side"),
        {"train": {"deployment": TRAINING_DEPLOYMENT, "worker_lost_s": WORKER_LOST_S}},
    )
    try:
        stack.up()
        prefect = services.prefect_env(stack.settings)
        with temporary_settings(
            {"PREFECT_API_URL": prefect["PREFECT_API_URL"],
             "PREFECT_API_AUTH_STRING": prefect["PREFECT_API_AUTH_STRING"]}
        ), get_client(sync_client=True) as client:  # fmt: skip
            create_pool(client, GPU_POOL)
            services.deploy(stack.settings)
            worker_env = {k: v for k, v in prefect.items() if k.startswith("PREFECT_API")} | {
                "PREFECT_WORKER_HEARTBEAT_SECONDS": str(HEARTBEAT_S),
                # The training's own lines (the resume) in its flow run's logs.
                "PREFECT_LOGGING_EXTRA_LOGGERS": "deepsummit",
            }
            # Both machines train the same configuration, so the second finds the first's
            # uploads.
            settings = {
                "mlflow": {"tracking_uri": stack.settings.mlflow.tracking_uri},
                "train": {"max_epochs": MAX_EPOCHS},
            }
            hidden = [stack.root]
            first_root = tmp_path_factory.mktemp("machine-a")
            with remote_worker(
                GPU_POOL, first_root, worker_env, settings, hidden, hostname="machine-a"
            ) as first:
                first.wait_online(client)
                chain_run = stack.trigger(watch=False)
                epoch = wait_uploaded(stack.settings.mlflow)
                first.process.kill()  # the machine dies: its namespace takes the run with it
                first.process.wait(timeout=30)
            killed = time.monotonic()
            second_root = tmp_path_factory.mktemp("machine-b")
            with remote_worker(
                GPU_POOL, second_root, worker_env, settings, hidden, hostname="machine-b"
            ) as second:
                ended = stack.wait_finished(chain_run, timeout_s=RESUMED_CHAIN_TIMEOUT_S)
                kill_to_end_s = time.monotonic() - killed
                print(f"\nkilled after epoch {epoch}; chain ended {kill_to_end_s:.1f} s later")
                yield LostWorker(stack, first, second, ended, epoch, kill_to_end_s)
    finally:
        stack.cli("down")


def training_runs(stack: Stack) -> dict[str, dict[str, Any]]:
    """The training flow runs by name."""
    runs = stack.post("/flow_runs/filter", {"flows": {"name": {"any_": [TRAINING_FLOW]}}})
    return {run["name"]: run for run in runs}


def test_the_chain_says_in_one_line_that_the_worker_was_lost_and_completes(
    lost_worker: LostWorker,
) -> None:
    stack = lost_worker.stack
    chain_run = lost_worker.chain_run
    assert chain_run["state_type"] == "COMPLETED", chain_run["state"]
    [line] = stack.log_messages(chain_run["id"], "lost its worker")
    match = LOST_LINE.match(line)
    assert match, line
    lost, worker, silent_s, restarted = match.groups()
    assert worker == "machine-a" and int(silent_s) >= WORKER_LOST_S
    runs = training_runs(stack)
    assert set(runs) == {lost, restarted}
    assert runs[lost]["state_type"] == "CRASHED"
    assert "lost its worker machine-a" in runs[lost]["state"]["message"]
    assert runs[restarted]["state_type"] == "COMPLETED"
    assert runs[restarted]["labels"][WORKER_NAME_LABEL] == "machine-b"
    assert runs[restarted]["parameters"] == runs[lost]["parameters"]


def test_the_second_machine_resumes_from_the_first_ones_checkpoint(
    lost_worker: LostWorker,
) -> None:
    stack = lost_worker.stack
    [restarted] = [r for r in training_runs(stack).values() if r["state_type"] == "COMPLETED"]
    resumed = stack.log_messages(restarted["id"], "resuming from")
    epochs = [
        int(m.group(1))
        for m in map(re.compile(r"runs:/\S+ after epoch (\d+)").search, resumed)
        if m
    ]
    assert epochs and epochs[0] >= 1, resumed


def test_the_version_is_registered_by_the_second_training_run(lost_worker: LostWorker) -> None:
    stack = lost_worker.stack
    [restarted] = [r for r in training_runs(stack).values() if r["state_type"] == "COMPLETED"]
    config = stack.settings.mlflow
    client = MlflowClient(config.tracking_uri)
    version = client.get_model_version(config.registered_model, champion_version(config).version)
    assert client.get_run(version.run_id).data.tags["prefect.flow_run_id"] == restarted["id"]
