"""The MLflow tracking server dies during training: one log line naming it at once, a bounded
wait, a one-line failure, and a rerun that resumes from the checkpoint once it is back."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient
from services_fixtures import free_port, start_mlflow

from deepsummit.core.config import Settings, load_settings
from deepsummit.core.context import RunContext
from deepsummit.core.errors import PipelineError
from deepsummit.services import supervisor as services
from deepsummit.train.stage import train_and_register

pytest_plugins = ["features_fixtures"]
pytestmark = pytest.mark.long

WAIT_S = 3.0


@pytest.fixture
def settings(bundle_features, tmp_path: Path):
    port = free_port()
    features_settings = bundle_features[0]
    settings = load_settings(
        "tiny",
        {
            "paths": {"var_dir": str(tmp_path / "var")},
            "services": {"run_dir": str(tmp_path / "services"), "mlflow_port": port},
            "features": features_settings.features.model_dump(mode="json"),
            "mlflow": {"tracking_uri": f"http://127.0.0.1:{port}", "unreachable_wait_s": WAIT_S},
            "train": {"checkpoint_dir": str(tmp_path / "checkpoints"), "max_epochs": 3,
                      "seeds": 1, "num_threads": 1},
        },
    )  # fmt: skip
    start_mlflow(settings)
    yield settings
    services.down(settings)


def test_a_server_lost_mid_training_fails_in_one_line_and_the_rerun_resumes(
    settings: Settings, bundle_features, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    snapshot = bundle_features[1].directory

    def kill_after_first_epoch(done: float, total: float, message: str) -> None:
        if done == 1:
            services.stop_process(settings, services.MLFLOW_SERVER, grace_s=2.0)

    caplog.set_level(logging.INFO, logger="deepsummit")
    started = time.monotonic()
    with pytest.raises(PipelineError) as raised:
        train_and_register(
            settings, RunContext(tmp_path / "run", progress=kill_after_first_epoch), snapshot
        )
    elapsed = time.monotonic() - started
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(
        f"MLflow tracking server {settings.mlflow.tracking_uri} did not answer for 3 s "
        "(member check seed 42, epoch 2)"
    )
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        f"MLflow tracking server {settings.mlflow.tracking_uri} is not answering" in w
        for w in warnings
    )
    assert elapsed < 120  # MLflow's own retries alone waited about 4 minutes
    # Nor are they tried when the run is marked FAILED on the server known gone (14 s more).
    retried = [
        r for r in caplog.records
        if r.name == "urllib3.connectionpool" and r.threadName == "MainThread"
    ]  # fmt: skip
    assert retried == [], [r.getMessage() for r in retried]
    assert any(
        r.getMessage().endswith("could not be marked FAILED")
        for r in caplog.records if r.levelno == logging.WARNING
    )  # fmt: skip
    assert list(settings.train.checkpoint_dir.rglob("last.pt"))  # the epoch done is kept

    caplog.clear()
    start_mlflow(settings)
    report = train_and_register(settings, RunContext(tmp_path / "rerun"), snapshot)
    assert any("resuming from" in r.getMessage() for r in caplog.records)
    # the check's training went on from its first epoch to the last, and the rerun's run holds
    # all three: the one done before the outage and the two done after it
    history = MlflowClient(settings.mlflow.tracking_uri).get_metric_history(
        report.mlflow_run_id, "member_check_seed_42_val_auc"
    )
    assert sorted(m.step for m in history) == [1, 2, 3]
