"""A training's checkpoint on the MLflow tracking server: a training killed on one worker resumes
on another (an empty checkpoint folder) from its upload, to the same weights; an upload that
differs from what was sent is never resumed; a server that stops answering skips the upload,
never the training."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient
from mlflow.entities import ViewType
from services_fixtures import free_port, output_lines, start_mlflow
from synthetic import DIMENSIONS, synthetic_arrays

from deepsummit.contracts.training_lease import Lease
from deepsummit.core.config import Settings, load_settings
from deepsummit.core.errors import PipelineError
from deepsummit.services import supervisor as services
from deepsummit.train.checkpoint_store import (
    UploadedCheckpoint,
    checkpoints_experiment,
    discard_uploads,
)
from deepsummit.train.trainer import train_model

SOURCE = Path(__file__).resolve().parents[2]
EPOCHS = 3
KILLED_AFTER = 2

# Worker A: the training in a process of its own, stopped (and waiting) after epoch `killed`
# once that epoch's checkpoint is written and uploaded, so the test kills it there.
WORKER_A = """
import json, sys, time
from pathlib import Path
from synthetic import DIMENSIONS, synthetic_arrays
from deepsummit.core.config import load_settings
from deepsummit.train.checkpoint_store import checkpoints_experiment, discard_uploads
from deepsummit.train.trainer import train_model

overrides, checkpoints, killed = json.loads(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])

def wait_to_be_killed(record):
    if record.epoch == killed:
        print(f"epoch {record.epoch} done", flush=True)
        time.sleep(600)

settings = load_settings("tiny", overrides=overrides)
train, validation = synthetic_arrays(2000, seed=1), synthetic_arrays(300, seed=2)
train_model(settings.train, settings.model, train, validation, DIMENSIONS, checkpoints,
            wait_to_be_killed, upload_to=settings.mlflow)
"""


def server_settings(root: Path, seed: int = 42) -> tuple[Settings, dict]:
    port = free_port()
    overrides = {
        "paths": {"var_dir": str(root / "var")},
        "services": {"run_dir": str(root / "services"), "mlflow_port": port},
        "mlflow": {"tracking_uri": f"http://127.0.0.1:{port}", "request_retries": 0},
        "train": {"learning_rate": 1e-2, "max_epochs": EPOCHS, "num_threads": 1, "seed": seed,
                  "checkpoint_upload_every": 1},
    }  # fmt: skip
    return load_settings("tiny", overrides=overrides), overrides


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    """An MLflow server proxying its artifacts (as `deepsummit up` starts it), and the
    overrides that make settings tracking to it."""
    settings, overrides = server_settings(tmp_path_factory.mktemp("mlflow"))
    start_mlflow(settings)
    yield settings, overrides
    services.down(settings)


@pytest.fixture(scope="module")
def splits():
    return synthetic_arrays(2000, seed=1), synthetic_arrays(300, seed=2)


def fit(settings: Settings, splits, checkpoints: Path, upload: bool = True, on_epoch_end=None):
    train, validation = splits
    return train_model(
        settings.train, settings.model, train, validation, DIMENSIONS, checkpoints,
        on_epoch_end, upload_to=settings.mlflow if upload else None,
    )  # fmt: skip


def assert_same_weights(result, expected) -> None:
    weights = expected.model.state_dict()
    for name, tensor in result.model.state_dict().items():
        assert torch.equal(tensor, weights[name]), name


def test_a_training_killed_on_one_worker_resumes_on_another_from_its_upload(
    server, splits, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings, overrides = server
    worker_a = subprocess.Popen(
        [sys.executable, "-c", WORKER_A, json.dumps(overrides), str(tmp_path / "a"),
         str(KILLED_AFTER)],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(SOURCE / "src"),
                                                          str(SOURCE / "tests")])},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        lines = output_lines(worker_a)
        seen: list[str] = []
        while (line := lines.get(timeout=300)) is not None:
            seen.append(line)
            if line == f"epoch {KILLED_AFTER} done":
                break
        assert seen and seen[-1] == f"epoch {KILLED_AFTER} done", "\n".join(seen[-20:])
        os.kill(worker_a.pid, signal.SIGKILL)
    finally:
        worker_a.kill()
        worker_a.wait()
    assert worker_a.returncode == -signal.SIGKILL

    caplog.set_level(logging.INFO, logger="deepsummit.train")
    worker_b = fit(settings, splits, tmp_path / "b")  # an empty checkpoint folder

    assert worker_b.resumed_from_epoch == KILLED_AFTER
    resumed = [m for m in caplog.messages if m.startswith("resuming from")]
    assert len(resumed) == 1
    assert re.fullmatch(
        rf"resuming from runs:/\w+/checkpoints/[ab]/last\.pt after epoch {KILLED_AFTER}",
        resumed[0],
    ), resumed
    uploaded = [m for m in caplog.messages if m.startswith("checkpoint of epoch")]
    assert [m.split()[3] for m in uploaded] == [str(e) for e in range(KILLED_AFTER + 1, EPOCHS + 1)]

    uninterrupted = fit(settings, splits, tmp_path / "c", upload=False)
    assert [(r.epoch, r.train_loss, r.val_auc) for r in worker_b.history] == [
        (r.epoch, r.train_loss, r.val_auc) for r in uninterrupted.history
    ]
    assert_same_weights(worker_b, uninterrupted)


def test_an_upload_that_differs_from_what_was_sent_is_not_resumed(
    server, splits, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _, overrides = server
    settings = load_settings("tiny", {**overrides, "train": {**overrides["train"], "seed": 7}})
    caplog.set_level(logging.INFO, logger="deepsummit.train")
    first = fit(settings, splits, tmp_path / "a")
    run_id, slot = re.search(
        rf"checkpoint of epoch {EPOCHS} uploaded to runs:/(\w+)/checkpoints/(\w)/last\.pt",
        caplog.text,
    ).groups()
    # One byte of the weights changed in the store: torch still reads such a file.
    damaged = tmp_path / "damaged" / "last.pt"
    damaged.parent.mkdir()
    data = bytearray((tmp_path / "a" / "last.pt").read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(data)
    MlflowClient(settings.mlflow.tracking_uri).log_artifact(
        run_id, str(damaged), artifact_path=f"checkpoints/{slot}"
    )

    caplog.clear()
    again = fit(settings, splits, tmp_path / "b")

    assert again.resumed_from_epoch == 0
    assert [m for m in caplog.messages if "uploaded as" in m and m.endswith(": not resumed")]
    assert_same_weights(again, first)


def test_a_server_that_stops_answering_skips_the_upload_not_the_training(
    splits, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings, _ = server_settings(tmp_path)
    start_mlflow(settings)

    def stop_server_after_first_epoch(record) -> None:
        if record.epoch == 1:
            services.stop_process(settings, services.MLFLOW_SERVER, grace_s=2.0)

    caplog.set_level(logging.INFO, logger="deepsummit.train")
    try:
        result = fit(settings, splits, tmp_path / "a", on_epoch_end=stop_server_after_first_epoch)
    finally:
        services.down(settings)

    assert [r.epoch for r in result.history] == [1, 2, 3]
    uri = settings.mlflow.tracking_uri
    assert [m for m in caplog.messages if m.startswith("checkpoint upload")] == [
        f"checkpoint upload of epoch {e} skipped: MLflow tracking server {uri} is not answering"
        for e in (2, 3)
    ]


def test_the_uploads_under_a_folder_are_discarded_with_their_files(
    server, splits, tmp_path: Path
) -> None:
    _, overrides = server
    root = tmp_path / "checkpoints"

    def seeded(seed: int) -> Settings:
        train = {**overrides["train"], "seed": seed, "checkpoint_dir": str(root)}
        return load_settings("tiny", {**overrides, "train": train})

    settings = seeded(11)
    fit(settings, splits, root / "stage-key" / "seed-11")
    fit(seeded(12), splits, root / "stage-key-2" / "seed-12")  # another stage's: kept
    client = MlflowClient(settings.mlflow.tracking_uri)
    experiment = client.get_experiment_by_name(checkpoints_experiment(settings.mlflow))

    def run_of(folder: str):
        [run] = client.search_runs(
            [experiment.experiment_id],
            filter_string=f"tags.`deepsummit.checkpoint_folder` = '{folder}'",
            run_view_type=ViewType.ALL,
        )
        return run

    discarded, kept = run_of("stage-key/seed-11"), run_of("stage-key-2/seed-12")
    assert client.list_artifacts(discarded.info.run_id, "checkpoints")

    assert discard_uploads(settings.mlflow, "stage-key") == 1

    assert client.get_run(discarded.info.run_id).info.lifecycle_stage == "deleted"
    assert not client.list_artifacts(discarded.info.run_id, "checkpoints")
    assert fit(settings, splits, tmp_path / "empty").resumed_from_epoch == 0
    assert client.get_run(kept.info.run_id).info.lifecycle_stage == "active"
    assert client.list_artifacts(kept.info.run_id, "checkpoints")


def test_a_training_without_its_lease_stops_at_its_next_upload(server, tmp_path: Path) -> None:
    """A training taken for lost, its successor named on the lease: its next upload is refused
    in one line instead of overwriting the checkpoint the successor resumes from."""
    settings, _ = server
    config = settings.mlflow
    client = MlflowClient(config.tracking_uri)
    snapshot_run = client.create_run(client.create_experiment("upload-lease")).info.run_id
    lost = Lease(snapshot_run, "lost-run")
    lost.grant(config)
    checkpoint = tmp_path / "last.pt"
    checkpoint.write_bytes(b"epoch 1")
    uploads = UploadedCheckpoint(config, "lease-key", "signature", "lease", lost)
    uploads.upload(checkpoint, 1)  # held: uploaded

    Lease(snapshot_run, "next-run").grant(config)
    checkpoint.write_bytes(b"epoch 2")
    with pytest.raises(PipelineError, match="checkpoint upload of epoch 2 refused: flow run "
                       "next-run holds the training lease"):  # fmt: skip
        uploads.upload(checkpoint, 2)

    fetched = tmp_path / "fetched.pt"
    assert UploadedCheckpoint(config, "lease-key", "signature", "lease").fetch(fetched)
    assert fetched.read_bytes() == b"epoch 1"
