"""The train stage: features snapshot → trained, calibrated, compared, logged and gated model.

One MLflow run per call: parameters, per-epoch metrics of every seed (live), the snapshot as a
dataset input; the transformer trained `train.seeds` times, the best seed by validation AUC
registered with the others as its band; every model (the transformer and both baselines, on
identical inputs) calibrated on the validation split and compared on the test split with
bootstrap intervals over expeditions (pipeline/train/comparison.py); plots; the model artifact
(pipeline/train/artifact.py) logged as a pyfunc and registered; the champion gate decides
(pipeline/train/registry.py).
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import polars as pl
from mlflow import MlflowClient
from mlflow.data.sources import LocalArtifactDatasetSource

from pipeline.config import Settings, TrainConfig
from pipeline.context import REGISTRY, Progress, RunContext, no_progress
from pipeline.features.build import (
    DRIFT_PROFILE_FILE,
    PLANNED_TEST_FILE,
    SNAPSHOT_FILE,
    load_features,
    load_history,
)
from pipeline.features.dataset import FeatureArrays
from pipeline.features.drift import DistributionProfile
from pipeline.serve.planned import KEY_COLUMNS
from pipeline.train.artifact import ModelArtifact
from pipeline.train.baselines import ModelPredictions, run_baselines
from pipeline.train.comparison import TRANSFORMER, Comparison, SeedSpread, compare
from pipeline.train.evaluation import auc_by_group, compute_metrics, plot_calibration, plot_roc
from pipeline.train.registry import Candidate, gate, log_and_register
from pipeline.train.tracking import git_commit, log_epoch, log_plots, training_params, ui_links
from pipeline.train.trainer import (
    EpochRecord,
    TrainResult,
    checkpoint_signature,
    model_config,
    predict_proba,
    train_model,
    training_slice,
)
from pipeline.warehouse import frame_digest

logger = logging.getLogger(__name__)

EXAMPLE_ROWS = 3


@dataclass(frozen=True)
class TrainReport:
    mlflow_run_id: str
    experiment_id: str
    model_name: str
    model_version: str
    champion: bool
    decision_reason: str
    comparison: Comparison
    tracking_uri: str
    run_url: str
    model_url: str
    weather_source: str
    digest: str  # the features table's content digest
    test_digest: str
    rows: dict[str, int]  # attempts per split (train: the rows actually trained on)
    best_seed: int
    best_epoch: int
    epochs_run: int
    inputs: tuple[str, ...]

    def render(self) -> str:
        status = "champion" if self.champion else "challenger"
        return "\n".join(
            [
                f"test split: {self.rows['test']:,} attempts (train {self.rows['train']:,}, "
                f"validation {self.rows['validation']:,}); weather source {self.weather_source}; "
                f"features {self.digest[:12]}; {len(self.inputs)} tabular inputs",
                "",
                self.comparison.markdown(),
                f"registered seed {self.best_seed} (best epoch {self.best_epoch} of "
                f"{self.epochs_run})",
                f"{self.model_name} v{self.model_version} ({status}): {self.decision_reason}",
                f"run:   {self.run_url}",
                f"model: {self.model_url}",
            ]
        )


def train_and_register(
    settings: Settings, context: RunContext, features_snapshot: Path
) -> TrainReport:
    """Train on a features snapshot, compare with the baselines, log, register and gate."""
    arrays, preprocessor = load_features(features_snapshot)
    snapshot = pl.read_parquet(features_snapshot / SNAPSHOT_FILE)
    rows = {name: snapshot.filter(pl.col("split") == name) for name in arrays}
    if rows["test"].height != len(arrays["test"]):
        raise ValueError(f"{features_snapshot}: snapshot and test.npz disagree on the test rows")
    digest = frame_digest(snapshot)
    test_digest = frame_digest(rows["test"])
    weather_source = preprocessor.weather_source
    dimensions = preprocessor.model_dimensions()
    config = model_config(settings.model, dimensions)
    signature = checkpoint_signature(config, settings.train, len(arrays["train"]))
    checkpoints = (
        settings.train.checkpoint_dir
        / hashlib.sha256(f"{digest}:{signature}".encode()).hexdigest()[:16]
    )
    inputs = preprocessor.inputs

    mlflow.set_tracking_uri(settings.mlflow.tracking_uri)
    experiment = mlflow.set_experiment(settings.mlflow.experiment)
    run_tags = {
        **context.tags,
        "data_digest": digest,
        "test_split_digest": test_digest,
        "weather_source": weather_source,
        "git_commit": git_commit(),
        "profile": settings.profile,
        "inputs_known_by": inputs.latest_known.value,
    }
    counts = {split: len(split_arrays) for split, split_arrays in arrays.items()}
    with mlflow.start_run(tags=run_tags, log_system_metrics=True) as mlflow_run:
        mlflow.log_params(
            training_params(
                settings.profile, settings.model, settings.train, counts, dimensions, inputs.names
            )
        )
        mlflow.log_input(
            mlflow.data.from_polars(
                snapshot,
                # An explicit source object: a bare path string matches two resolvers.
                source=LocalArtifactDatasetSource(str(features_snapshot / SNAPSHOT_FILE)),
                name="features",
                targets="label",
            ),
            context="training",
        )
        results = train_seeds(
            settings.train, settings.model, arrays, dimensions, checkpoints, context.progress
        )
        ordered = registered_first(results)
        best = ordered[0]
        models = [
            transformer_predictions(ordered, arrays),
            *run_baselines(
                training_slice(arrays["train"], settings.train.max_train_rows, settings.train.seed),
                arrays["validation"],
                arrays["test"],
                preprocessor.categorical_cardinalities,
                settings.train.seed,
                settings.train.num_threads,
            ),
        ]
        seeds = seed_spread(results, arrays["test"])
        groups = rows["test"].select(pl.format("{}/{}", "expid", "year")).to_series().to_numpy()
        comparison = compare(
            models,
            arrays["validation"].label,
            arrays["test"].label,
            groups,
            settings.train.calibration,
            seeds,
        )
        mlflow.log_metrics(
            {
                **comparison.metrics(),
                "best_seed": best.seed,
                "best_epoch": best.best_epoch,
                "best_val_auc": best.best_val_auc,
                "epochs_run": len(best.history),
                "train_rows": best.train_rows,
            }
        )
        mlflow.log_text(comparison.markdown(), "evaluation/comparison.md")
        calibrated = _calibrated_test(comparison, models)
        mlflow.log_dict(
            _group_aucs(rows["test"], arrays["test"].label, calibrated[TRANSFORMER]),
            "evaluation/auc_by_group.json",
        )
        _log_evaluation_plots(context.run_dir / "plots", arrays, models, calibrated, best)

        artifact = ModelArtifact(
            networks=[r.model for r in ordered],
            seeds=[r.seed for r in ordered],
            preprocessor=preprocessor,
            calibrator=comparison.calibrators[TRANSFORMER],
            history=load_history(features_snapshot),
            drift_reference=DistributionProfile.from_json(
                (features_snapshot / DRIFT_PROFILE_FILE).read_text()
            ),
            metadata={
                "weather_source": weather_source,
                "inputs": list(inputs.names),
                "inputs_known_by": inputs.latest_known.value,
                "train_until": settings.features.split.train_until,
                "features_digest": digest,
            },
        )
        directory = artifact.save(context.run_dir / "model")
        test_input = pl.read_parquet(features_snapshot / PLANNED_TEST_FILE)
        example = test_input.head(EXAMPLE_ROWS).drop(KEY_COLUMNS).to_pandas()
        version = log_and_register(settings.mlflow, directory, example, artifact)
        predictions = (
            rows["test"]
            .select("expid", "member_id", "year", "label")
            .with_columns(probability=pl.Series(calibrated[TRANSFORMER]))
        )
        with context.exclusive(REGISTRY):  # one gate at a time: one champion
            decision = gate(
                MlflowClient(settings.mlflow.tracking_uri),
                settings.mlflow,
                Candidate(
                    version=str(version.version),
                    test_digest=test_digest,
                    weather_source=weather_source,
                    inputs_known_by=inputs.latest_known,
                    predictions=predictions,
                    test_input=test_input,
                ),
            )
        mlflow.set_tags(
            {
                "model_version": str(version.version),
                "champion_decision": "promoted" if decision.promoted else "challenger",
                "champion_reason": decision.reason,
            }
        )
    shutil.rmtree(checkpoints, ignore_errors=True)  # the model is safe in the registry now

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
        comparison=comparison,
        tracking_uri=settings.mlflow.tracking_uri,
        run_url=run_url,
        model_url=model_url,
        weather_source=weather_source,
        digest=digest,
        test_digest=test_digest,
        rows={"train": best.train_rows, **{k: v for k, v in counts.items() if k != "train"}},
        best_seed=best.seed,
        best_epoch=best.best_epoch,
        epochs_run=len(best.history),
        inputs=inputs.names,
    )


def train_seeds(
    train_config: TrainConfig,
    hyperparameters: Any,
    arrays: dict[str, FeatureArrays],
    dimensions: dict[str, Any],
    checkpoints: Path,
    progress: Progress = no_progress,
    epoch_log: Callable[[EpochRecord, str], None] = log_epoch,
) -> list[TrainResult]:
    """The transformer trained once per seed (seed, seed + 1, …), each resumable from its own
    checkpoint folder; every epoch goes to `epoch_log` under `seed_<s>_` (by default the active
    MLflow run) and is counted in `progress` (epochs of all seeds; early stopping may end a
    seed sooner)."""
    results = []
    planned = train_config.seeds * train_config.max_epochs
    for offset in range(train_config.seeds):
        seed = train_config.seed + offset

        def on_epoch_end(record: EpochRecord, seed: int = seed, offset: int = offset) -> None:
            epoch_log(record, f"seed_{seed}_")
            progress(
                offset * train_config.max_epochs + record.epoch,
                planned,
                f"seed {seed} ({offset + 1} of {train_config.seeds}), epoch {record.epoch}: "
                f"validation AUC {record.val_auc:.4f}",
            )

        results.append(
            train_model(
                replace_seed(train_config, seed),
                hyperparameters,
                arrays["train"],
                arrays["validation"],
                dimensions,
                checkpoints / f"seed-{seed}",
                on_epoch_end,
            )
        )
    for result in results:
        for record in result.history[: result.resumed_from_epoch]:
            epoch_log(record, f"seed_{result.seed}_")  # epochs done before a crash
    return results


def registered_first(results: list[TrainResult]) -> list[TrainResult]:
    """The seeds' results with the one a run registers (best validation AUC) first."""
    best = max(results, key=lambda r: r.best_val_auc)
    return [best, *(r for r in results if r is not best)]


def seed_spread(results: list[TrainResult], test: FeatureArrays) -> SeedSpread:
    """Each seed's validation AUC and test AUC, in the order of `results`."""
    return SeedSpread(
        tuple(r.seed for r in results),
        tuple(r.best_val_auc for r in results),
        tuple(compute_metrics(test.label, predict_proba(r.model, test)).auc for r in results),
    )


def replace_seed(train_config: TrainConfig, seed: int) -> TrainConfig:
    return train_config.model_copy(update={"seed": seed})


def transformer_predictions(
    ordered: list[TrainResult], arrays: dict[str, FeatureArrays]
) -> ModelPredictions:
    """The registered seed's probabilities on validation and test, with its cost."""
    best = ordered[0]
    started = time.perf_counter()
    test = predict_proba(best.model, arrays["test"])
    per_1000 = (time.perf_counter() - started) / max(1, len(arrays["test"])) * 1000
    return ModelPredictions(
        TRANSFORMER,
        predict_proba(best.model, arrays["validation"]),
        test,
        sum(r.seconds for r in ordered),
        per_1000,
    )


def _calibrated_test(
    comparison: Comparison, models: list[ModelPredictions]
) -> dict[str, np.ndarray]:
    from pipeline.train.comparison import logit

    return {m.name: comparison.calibrators[m.name].probabilities(logit(m.test)) for m in models}


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


def _log_evaluation_plots(
    directory: Path,
    arrays: dict[str, FeatureArrays],
    models: list[ModelPredictions],
    calibrated: dict[str, np.ndarray],
    best: TrainResult,
) -> None:
    """ROC, reliability before and after calibration, and the registered seed's learning
    curve."""
    labels = arrays["test"].label
    log_plots(
        directory,
        [
            plot_roc(labels, calibrated, directory / "roc.png"),
            plot_calibration(
                labels,
                {m.name: m.test for m in models},
                directory / "calibration_before.png",
                "before calibration",
            ),
            plot_calibration(
                labels, calibrated, directory / "calibration.png", "after calibration"
            ),
        ],
        best.history,
    )
