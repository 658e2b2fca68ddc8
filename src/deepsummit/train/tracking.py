"""What a training run writes to MLflow besides the model: parameters, per-epoch metrics, plots,
the links a person follows, and the code version."""

from __future__ import annotations

import json
import subprocess
from dataclasses import asdict
from pathlib import Path

import mlflow

from deepsummit.core.config import PROJECT_ROOT, TrainConfig
from deepsummit.model.config import ModelConfig
from deepsummit.train.evaluation import plot_learning_curve
from deepsummit.train.trainer import EpochRecord

# The `kind` tag of a training run (drift reports log runs of their own to the experiment).
TRAINING_RUN = "training"


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


def log_epoch(record: EpochRecord, prefix: str = "") -> None:
    """One epoch's metrics in the active run, at step = epoch (`prefix` tells seeds apart)."""
    values = asdict(record)
    step = values.pop("epoch")
    values["epoch_seconds"] = values.pop("seconds")
    mlflow.log_metrics({f"{prefix}{name}": value for name, value in values.items()}, step=step)


def training_params(
    profile: str,
    architecture: ModelConfig,
    train_config: TrainConfig,
    rows: dict[str, int],
    dimensions: dict[str, object],
    inputs: tuple[str, ...],
) -> dict[str, object]:
    knobs = {k: v for k, v in asdict(architecture).items() if k not in ModelConfig.INPUT_DIMENSIONS}
    params: dict[str, object] = {f"model.{k}": v for k, v in knobs.items()}
    train = train_config.model_dump(exclude=set(TrainConfig.OPERATIONAL))
    params |= {f"train.{k}": v for k, v in train.items()}
    params |= {f"rows.{split}": count for split, count in rows.items()}
    params["profile"] = profile
    params["categorical_cardinalities"] = json.dumps(dimensions["categorical_cardinalities"])
    params["inputs"] = ",".join(inputs)
    return params


def log_plots(directory: Path, drawn: list[Path], history: tuple[EpochRecord, ...]) -> None:
    """Plots already drawn into `directory`, and the learning curve, logged under plots/."""
    curve = plot_learning_curve(history, directory / "learning_curve.png")
    for path in (*drawn, curve):
        mlflow.log_artifact(str(path), artifact_path="plots")
