"""What a training run writes to MLflow besides the model: parameters, per-epoch metrics, plots,
the links a person follows, and the code version."""

from __future__ import annotations

import json
import subprocess
from dataclasses import asdict
from pathlib import Path

import mlflow
import numpy as np

from pipeline.config import PROJECT_ROOT, ModelHyperparameters, TrainConfig
from pipeline.train.evaluation import plot_calibration, plot_learning_curve, plot_roc
from pipeline.train.trainer import EpochRecord


def git_commit() -> str:
    try:
        result = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True
        )
    except OSError:
        return "unknown"
    return result.stdout.strip() if result.returncode == 0 else "unknown"


def ui_links(
    tracking_uri: str, experiment_id: str, run_id: str, name: str, version: str
) -> tuple[str, str]:
    """(run page, model version page) in the MLflow UI when tracking through a server; the
    MLflow URIs otherwise."""
    if tracking_uri.startswith(("http://", "https://")):
        base = tracking_uri.rstrip("/")
        return (
            f"{base}/#/experiments/{experiment_id}/runs/{run_id}",
            f"{base}/#/models/{name}/versions/{version}",
        )
    return f"runs:/{run_id}", f"models:/{name}/{version}"


def log_epoch(record: EpochRecord) -> None:
    """One epoch's metrics in the active run, at step = epoch."""
    values = asdict(record)
    step = values.pop("epoch")
    values["epoch_seconds"] = values.pop("seconds")
    mlflow.log_metrics(values, step=step)


def training_params(
    profile: str,
    hyperparameters: ModelHyperparameters,
    train_config: TrainConfig,
    rows: dict[str, int],
    cardinalities: tuple[int, ...],
) -> dict[str, object]:
    params: dict[str, object] = {f"model.{k}": v for k, v in hyperparameters.model_dump().items()}
    train = train_config.model_dump(exclude=set(TrainConfig.OPERATIONAL))
    params |= {f"train.{k}": v for k, v in train.items()}
    params |= {f"rows.{split}": count for split, count in rows.items()}
    params["profile"] = profile
    params["categorical_cardinalities"] = json.dumps(cardinalities)
    return params


def log_plots(
    directory: Path,
    labels: np.ndarray,
    probabilities: dict[str, np.ndarray],
    history: tuple[EpochRecord, ...],
) -> None:
    """ROC, calibration and learning curve, drawn into `directory` and logged under plots/."""
    for path in (
        plot_roc(labels, probabilities, directory / "roc.png"),
        plot_calibration(labels, probabilities, directory / "calibration.png"),
        plot_learning_curve(history, directory / "learning_curve.png"),
    ):
        mlflow.log_artifact(str(path), artifact_path="plots")
