"""Epoch metrics in MLflow: a training judged on nothing logs no validation figures."""

from __future__ import annotations

import math
from pathlib import Path

import mlflow
from mlflow import MlflowClient

from deepsummit.train.checkpoint import EpochRecord
from deepsummit.train.tracking import log_epoch


def test_a_refit_logs_its_loss_and_no_validation_figures(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(uri)
    judged = EpochRecord(1, 0.61, 0.58, 0.74, 1e-3, 2.0)
    refit = EpochRecord(1, 0.60, math.nan, math.nan, 1e-3, 2.5)
    try:
        # An experiment of its own: another test in this process may have left its active
        # experiment's id behind, which this store does not hold.
        experiment = MlflowClient(uri).create_experiment("epochs")
        with mlflow.start_run(experiment_id=experiment) as run:
            log_epoch(judged, "member_check_seed_42_")
            log_epoch(refit, "refit_seed_42_")
    finally:
        mlflow.set_tracking_uri(previous)
    metrics = MlflowClient(uri).get_run(run.info.run_id).data.metrics
    assert metrics["member_check_seed_42_val_auc"] == 0.74
    assert metrics["refit_seed_42_train_loss"] == 0.60
    assert metrics["refit_seed_42_epoch_seconds"] == 2.5
    assert not {"refit_seed_42_val_auc", "refit_seed_42_val_loss"} & set(metrics)
