"""The train stage: features folder → trained, evaluated, compared, logged and gated model.

One MLflow run per call: parameters, per-epoch metrics (live), the features snapshot as a
dataset input, test metrics of the transformer and both baselines on the same split, AUC per
peak and per season, plots, the pyfunc model; then the model is registered and the champion
gate decides (pipeline/registry.py).
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import mlflow
import numpy as np
import polars as pl
from mlflow import MlflowClient
from mlflow.data.sources import LocalArtifactDatasetSource

from pipeline.config import Settings, TrainConfig
from pipeline.context import RunContext
from pipeline.features.build import SNAPSHOT_FILE, load_features
from pipeline.train.artifact import model_input_frame, write_model_files
from pipeline.train.baselines import run_baselines
from pipeline.train.evaluation import Metrics, auc_by_group, compute_metrics
from pipeline.train.registry import Candidate, gate, log_and_register
from pipeline.train.tracking import git_commit, log_epoch, log_plots, training_params, ui_links
from pipeline.train.trainer import (
    TrainResult,
    checkpoint_signature,
    model_config,
    predict_proba,
    train_model,
    training_slice,
)
from pipeline.warehouse import frame_digest

logger = logging.getLogger(__name__)

TRANSFORMER = "transformer"
EXAMPLE_ROWS = 3


@dataclass(frozen=True)
class ModelScore:
    name: str
    metrics: Metrics
    train_seconds: float
    predict_seconds_per_1000: float


@dataclass(frozen=True)
class TrainReport:
    mlflow_run_id: str
    experiment_id: str
    model_name: str
    model_version: str
    champion: bool
    decision_reason: str
    scores: tuple[ModelScore, ...]  # the transformer first, then the baselines
    tracking_uri: str
    run_url: str
    model_url: str
    weather_source: str
    digest: str  # the features snapshot's content digest
    test_digest: str
    rows: dict[str, int]  # attempts per split (train: the rows actually trained on)
    best_epoch: int
    epochs_run: int

    @property
    def asset_key(self) -> str:
        return f"mlflow-model://{self.model_name}/{self.model_version}"

    def render(self) -> str:
        header = (
            f"{'model':<22}{'AUC':>8}{'accuracy':>10}{'Brier':>8}{'ECE':>8}"
            f"{'log loss':>10}{'train s':>10}{'s/1k pred':>11}"
        )
        lines = [
            f"test split: {self.rows['test']:,} attempts (train {self.rows['train']:,}, "
            f"validation {self.rows['validation']:,}); weather source {self.weather_source}; "
            f"features {self.digest[:12]}",
            "",
            header,
            "-" * len(header),
        ]
        for score in self.scores:
            m = score.metrics
            lines.append(
                f"{score.name:<22}{m.auc:>8.4f}{m.accuracy:>10.4f}{m.brier:>8.4f}{m.ece:>8.4f}"
                f"{m.log_loss:>10.4f}{score.train_seconds:>10.1f}"
                f"{score.predict_seconds_per_1000:>11.4f}"
            )
        status = "champion" if self.champion else "challenger"
        lines += [
            "",
            f"best epoch {self.best_epoch} of {self.epochs_run}",
            f"registered {self.model_name} v{self.model_version} ({status}): "
            f"{self.decision_reason}",
            f"run:   {self.run_url}",
            f"model: {self.model_url}",
        ]
        return "\n".join(lines)


def train_and_register(
    settings: Settings, context: RunContext, features_snapshot: Path
) -> TrainReport:
    """Train on a features snapshot, evaluate against the baselines, log, register and gate."""
    arrays, preprocessor = load_features(features_snapshot)
    snapshot = pl.read_parquet(features_snapshot / SNAPSHOT_FILE)
    test_rows = snapshot.filter(pl.col("split") == "test")
    if test_rows.height != len(arrays["test"]):
        raise ValueError(f"{features_snapshot}: snapshot and test.npz disagree on the test rows")
    cardinalities = preprocessor.categorical_cardinalities
    digest = frame_digest(snapshot)
    test_digest = frame_digest(test_rows)
    weather_source = preprocessor.weather_source

    mlflow.set_tracking_uri(settings.mlflow.tracking_uri)
    experiment = mlflow.set_experiment(settings.mlflow.experiment)
    run_tags = {
        **context.tags,
        "data_digest": digest,
        "test_split_digest": test_digest,
        "weather_source": weather_source,
        "git_commit": git_commit(),
        "profile": settings.profile,
    }
    config = model_config(settings.model, cardinalities)
    signature = checkpoint_signature(config, settings.train, len(arrays["train"]))
    checkpoint_dir = (
        settings.train.checkpoint_dir
        / hashlib.sha256(f"{digest}:{signature}".encode()).hexdigest()[:16]
    )
    rows = {split: len(split_arrays) for split, split_arrays in arrays.items()}

    with mlflow.start_run(tags=run_tags) as mlflow_run:
        mlflow.log_params(
            training_params(settings.profile, settings.model, settings.train, rows, cardinalities)
        )
        dataset = mlflow.data.from_polars(
            snapshot,
            # An explicit source object: a bare path string matches two resolvers (a warning).
            source=LocalArtifactDatasetSource(str(features_snapshot / SNAPSHOT_FILE)),
            name="features",
            targets="label",
        )
        mlflow.log_input(dataset, context="training")

        result = train_model(
            settings.train,
            settings.model,
            arrays["train"],
            arrays["validation"],
            cardinalities,
            checkpoint_dir,
            log_epoch,
        )
        for record in result.history[: result.resumed_from_epoch]:
            log_epoch(record)  # epochs done before a crash, logged by the failed run

        scores, probabilities = score_models(settings.train, result, arrays)
        for score in scores:
            mlflow.log_metrics(score.metrics.as_dict(f"{_slug(score.name)}_test_"))
        groups = _group_aucs(test_rows, arrays["test"].label, probabilities[TRANSFORMER])
        mlflow.log_dict(groups, "evaluation/auc_by_group.json")
        mlflow.log_metrics(
            {
                "best_epoch": result.best_epoch,
                "best_val_auc": result.best_val_auc,
                "epochs_run": len(result.history),
                "train_rows": result.train_rows,
            }
        )
        log_plots(context.run_dir / "plots", arrays["test"].label, probabilities, result.history)

        files = write_model_files(context.run_dir / "model", result.model, preprocessor)
        test_frame = model_input_frame(test_rows, arrays["test"], preprocessor)
        version = log_and_register(
            settings.mlflow,
            files,
            test_frame.head(EXAMPLE_ROWS),
            probabilities[TRANSFORMER][:EXAMPLE_ROWS],
        )
        transformer = scores[0].metrics
        decision = gate(
            MlflowClient(settings.mlflow.tracking_uri),
            settings.mlflow,
            Candidate(
                version=str(version.version),
                test_auc=transformer.auc,
                test_digest=test_digest,
                weather_source=weather_source,
                test_frame=test_frame,
                test_labels=test_rows["label"].to_pandas(),
            ),
            mlflow.pyfunc.load_model,
        )
        mlflow.set_tags(
            {
                "model_version": str(version.version),
                "champion_decision": "promoted" if decision.promoted else "challenger",
                "champion_reason": decision.reason,
            }
        )
    shutil.rmtree(checkpoint_dir, ignore_errors=True)  # the model is safe in the registry now

    run_url, model_url = ui_links(
        settings.mlflow.tracking_uri,
        experiment.experiment_id,
        mlflow_run.info.run_id,
        settings.mlflow.registered_model,
        str(version.version),
    )
    return TrainReport(
        mlflow_run_id=mlflow_run.info.run_id,
        experiment_id=experiment.experiment_id,
        model_name=settings.mlflow.registered_model,
        model_version=str(version.version),
        champion=decision.promoted,
        decision_reason=decision.reason,
        scores=tuple(scores),
        tracking_uri=settings.mlflow.tracking_uri,
        run_url=run_url,
        model_url=model_url,
        weather_source=weather_source,
        digest=digest,
        test_digest=test_digest,
        rows={
            "train": result.train_rows,
            "validation": len(arrays["validation"]),
            "test": len(arrays["test"]),
        },
        best_epoch=result.best_epoch,
        epochs_run=len(result.history),
    )


def _slug(name: str) -> str:
    return {"logistic regression": "logreg", "LightGBM": "lightgbm"}.get(name, name)


def score_models(
    train_config: TrainConfig, result: TrainResult, arrays: dict
) -> tuple[list[ModelScore], dict[str, np.ndarray]]:
    """The transformer and both baselines on the test split: scores and test probabilities."""
    test = arrays["test"]
    started = time.perf_counter()
    transformer_probabilities = predict_proba(result.model, test, train_config.batch_size)
    per_1000 = (time.perf_counter() - started) / max(1, len(test)) * 1000
    scores = [
        ModelScore(
            TRANSFORMER,
            compute_metrics(test.label, transformer_probabilities),
            result.seconds,
            per_1000,
        )
    ]
    probabilities = {TRANSFORMER: transformer_probabilities}
    cardinalities = result.config.categorical_cardinalities
    for baseline in run_baselines(
        training_slice(arrays["train"], train_config.max_train_rows, train_config.seed),
        arrays["validation"],
        test,
        cardinalities,
        train_config.seed,
        train_config.num_threads,
    ):
        scores.append(
            ModelScore(
                baseline.name,
                baseline.metrics,
                baseline.train_seconds,
                baseline.predict_seconds_per_1000,
            )
        )
        probabilities[baseline.name] = baseline.test_probabilities
    return scores, probabilities


def _group_aucs(
    test_rows: pl.DataFrame, labels: np.ndarray, probabilities: np.ndarray
) -> dict[str, dict[str, float | None]]:
    groups = {}
    for column in ("peakid", "season"):
        aucs = auc_by_group(labels, probabilities, test_rows[column].fill_null("unknown"))
        groups[column] = {k: (None if np.isnan(v) else v) for k, v in aucs.items()}
        mlflow.log_metrics(
            {f"test_auc_{column}_{k}": v for k, v in aucs.items() if not np.isnan(v)}
        )
    return groups
