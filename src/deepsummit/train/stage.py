"""The train stage: features snapshot → trained, calibrated, compared, logged and gated model.

One MLflow run per call: parameters, per-epoch metrics of every seed (live), the snapshot as a
dataset input; the transformer trained `train.seeds` times and registered as their ensemble (the
answer is the seeds' mean logit, their spread its band); every model (the transformer and both
baselines, on identical inputs) calibrated on the validation split and compared on the test split
with bootstrap intervals over expeditions (deepsummit/train/comparison.py); plots; the model
artifact (deepsummit/contracts/artifact.py) logged as a pyfunc and registered; the champion gate
decides (deepsummit/train/registry.py).
"""

from __future__ import annotations

import dataclasses
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
import pandas as pd
import polars as pl
from mlflow import MlflowClient
from mlflow.data.sources import LocalArtifactDatasetSource
from sklearn.metrics import roc_auc_score

from deepsummit.contracts.arrays import FeatureArrays, seed_logits
from deepsummit.contracts.artifact import ModelArtifact
from deepsummit.contracts.calibration import Calibrator, Method
from deepsummit.contracts.drift import DistributionProfile
from deepsummit.contracts.preprocessing import Preprocessor
from deepsummit.contracts.snapshot import (
    DRIFT_PROFILE_FILE,
    PLANNED_TEST_FILE,
    SNAPSHOT_FILE,
    load_features,
    load_history,
    read_features,
)
from deepsummit.core.config import Settings, TrainConfig
from deepsummit.core.context import REGISTRY, Progress, RunContext, no_progress
from deepsummit.core.planned import KEY_COLUMNS
from deepsummit.core.warehouse import frame_digest
from deepsummit.train.baselines import ModelPredictions, run_baselines
from deepsummit.train.bootstrap import weighted_auc
from deepsummit.train.comparison import TRANSFORMER, Comparison, SeedSpread, compare, logit
from deepsummit.train.evaluation import auc_by_group, plot_calibration, plot_roc
from deepsummit.train.registry import Candidate, GateDecision, gate, log_and_register
from deepsummit.train.tracking import (
    TRAINING_RUN,
    bound_requests,
    git_commit,
    guarded_epoch_log,
    log_epoch,
    log_plots,
    training_params,
    training_run,
    ui_links,
    wait_for_tracking,
)
from deepsummit.train.trainer import (
    EpochRecord,
    TrainResult,
    checkpoint_signature,
    train_model,
    training_slice,
)

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
    seeds: tuple[int, ...]
    best_epochs: tuple[int, ...]  # each seed's best epoch (the weights it keeps)
    epochs_run: tuple[int, ...]
    inputs: tuple[str, ...]

    def epochs_note(self) -> str:
        """ "42, 43, 44 (best epochs 3/4, 4/4, 2/4)": each seed's best epoch of those run."""
        best = ", ".join(f"{b}/{n}" for b, n in zip(self.best_epochs, self.epochs_run, strict=True))
        return f"{', '.join(map(str, self.seeds))} (best epochs {best})"

    def render(self) -> str:
        status = "champion" if self.champion else "challenger"
        return "\n".join(
            [
                f"test split: {self.rows['test']:,} attempts (train {self.rows['train']:,}, "
                f"validation {self.rows['validation']:,}); weather source {self.weather_source}; "
                f"features {self.digest[:12]}; {len(self.inputs)} tabular inputs",
                "",
                self.comparison.markdown(),
                f"registered: the mean of seeds {self.epochs_note()}",
                f"{self.model_name} v{self.model_version} ({status}): {self.decision_reason}",
                f"run:   {self.run_url}",
                f"model: {self.model_url}",
            ]
        )


@dataclass(frozen=True)
class TrainingData:
    """A features snapshot as the train stage reads it: the arrays and rows of each split."""

    directory: Path
    arrays: dict[str, FeatureArrays]
    preprocessor: Preprocessor
    snapshot: pl.DataFrame  # every attempt with its split (features.parquet)
    rows: dict[str, pl.DataFrame]  # the snapshot's rows of each split, in the arrays' order
    digest: str  # of the whole snapshot table
    test_digest: str  # of its test rows: what the gate compares on

    @classmethod
    def read(cls, directory: Path) -> TrainingData:
        arrays, preprocessor = load_features(directory)
        snapshot = read_features(directory)
        rows = {name: snapshot.filter(pl.col("split") == name) for name in arrays}
        if rows["test"].height != len(arrays["test"]):
            raise ValueError(f"{directory}: snapshot and test.npz disagree on the test rows")
        return cls(
            directory, arrays, preprocessor, snapshot, rows,
            frame_digest(snapshot), frame_digest(rows["test"]),
        )  # fmt: skip

    @property
    def counts(self) -> dict[str, int]:
        return {split: len(arrays) for split, arrays in self.arrays.items()}

    def groups(self, split: str) -> np.ndarray:
        """Each row's expedition: what the bootstrap resamples."""
        return self.rows[split].select(pl.format("{}/{}", "expid", "year")).to_series().to_numpy()


def train_and_register(
    settings: Settings, context: RunContext, features_snapshot: Path
) -> TrainReport:
    """Train on a features snapshot, compare with the baselines, log, register and gate."""
    data = TrainingData.read(features_snapshot)
    checkpoints = checkpoint_folder(settings, data)
    bound_requests(settings.mlflow)
    wait_for_tracking(settings.mlflow, "before training")
    mlflow.set_tracking_uri(settings.mlflow.tracking_uri)
    experiment = mlflow.set_experiment(settings.mlflow.experiment)
    with training_run(run_tags(settings, context, data)) as run:
        log_inputs(settings, data)
        results = train_seeds(
            settings.train, settings.model, data.arrays,
            data.preprocessor.model_dimensions(), checkpoints, context.progress,
            guarded_epoch_log(settings.mlflow),
        )  # fmt: skip
        comparison, calibrated = evaluate(settings, data, results, context.run_dir)
        artifact = model_artifact(settings, data, results, comparison)
        version = log_and_register(
            settings.mlflow,
            artifact.save(context.run_dir / "model"),
            planned_example(data),
            artifact,
        )
        decision = gate_version(settings, context, data, str(version.version), calibrated)
    shutil.rmtree(checkpoints, ignore_errors=True)  # the model is safe in the registry now
    run_url, model_url = ui_links(
        settings.mlflow.tracking_uri,
        experiment.experiment_id,
        run.info.run_id,
        settings.mlflow.registered_model,
        str(version.version),
    )
    return TrainReport(
        mlflow_run_id=run.info.run_id,
        experiment_id=experiment.experiment_id,
        model_name=settings.mlflow.registered_model,
        model_version=str(version.version),
        champion=decision.promoted,
        decision_reason=decision.reason,
        comparison=comparison,
        tracking_uri=settings.mlflow.tracking_uri,
        run_url=run_url,
        model_url=model_url,
        weather_source=data.preprocessor.weather_source,
        digest=data.digest,
        test_digest=data.test_digest,
        rows={**data.counts, "train": results[0].train_rows},
        seeds=tuple(r.seed for r in results),
        best_epochs=tuple(r.best_epoch for r in results),
        epochs_run=tuple(len(r.history) for r in results),
        inputs=data.preprocessor.inputs.names,
    )


def checkpoint_folder(settings: Settings, data: TrainingData) -> Path:
    """Where this training resumes from after a crash: one folder per snapshot and settings."""
    config = settings.model.with_inputs(data.preprocessor.model_dimensions())
    signature = checkpoint_signature(config, settings.train, len(data.arrays["train"]))
    key = hashlib.sha256(f"{data.digest}:{signature}".encode()).hexdigest()[:16]
    return settings.train.checkpoint_dir / key


def run_tags(settings: Settings, context: RunContext, data: TrainingData) -> dict[str, str]:
    return {
        **context.tags,
        "data_digest": data.digest,
        "test_split_digest": data.test_digest,
        "weather_source": data.preprocessor.weather_source,
        "git_commit": git_commit(),
        "profile": settings.profile,
        "inputs_known_by": data.preprocessor.inputs.latest_known.value,
        "kind": TRAINING_RUN,
    }


def log_inputs(settings: Settings, data: TrainingData) -> None:
    """The run's parameters, and the snapshot as its dataset input (with its digest)."""
    mlflow.log_params(
        training_params(
            settings.profile,
            settings.model,
            settings.train,
            data.counts,
            data.preprocessor.model_dimensions(),
            data.preprocessor.inputs.names,
        )
    )
    mlflow.log_input(
        mlflow.data.from_polars(
            data.snapshot,
            # An explicit source object: a bare path string matches two resolvers.
            source=LocalArtifactDatasetSource(str(data.directory / SNAPSHOT_FILE)),
            name="features",
            targets="label",
        ),
        context="training",
    )


def evaluate(
    settings: Settings, data: TrainingData, results: list[TrainResult], run_dir: Path
) -> tuple[Comparison, dict[str, np.ndarray]]:
    """The transformer and the baselines on identical rows, calibrated the same way, compared
    with intervals; metrics, the comparison, AUC by group and plots logged. Returns the
    comparison and each model's calibrated test probabilities."""
    arrays = data.arrays
    models = [
        transformer_predictions(results, arrays),
        *run_baselines(
            training_slice(arrays["train"], settings.train.max_train_rows, settings.train.seed),
            arrays["validation"],
            arrays["test"],
            data.preprocessor.categorical_cardinalities,
            settings.train.seed,
            settings.train.num_threads,
        ),
    ]
    comparison = compare_with_seeds(
        models, results, arrays, data.groups("test"), settings.train.calibration
    )
    mlflow.log_metrics(
        {
            **comparison.metrics(),
            **{f"seed_{r.seed}_best_epoch": r.best_epoch for r in results},
            **{f"seed_{r.seed}_best_val_auc": r.best_val_auc for r in results},
            # The answer's own validation AUC (with one seed, that seed's best_val_auc).
            "ensemble_val_auc": float(
                roc_auc_score(arrays["validation"].label, models[0].validation)
            ),
            **{f"seed_{r.seed}_epochs_run": len(r.history) for r in results},
            "train_rows": results[0].train_rows,
        }
    )
    mlflow.log_text(comparison.markdown(), "evaluation/comparison.md")
    calibrated = _calibrated_test(comparison, models)
    mlflow.log_dict(
        _group_aucs(data.rows["test"], arrays["test"].label, calibrated[TRANSFORMER]),
        "evaluation/auc_by_group.json",
    )
    _log_evaluation_plots(run_dir / "plots", arrays, models, calibrated, results[0])
    return comparison, calibrated


def model_artifact(
    settings: Settings, data: TrainingData, results: list[TrainResult], comparison: Comparison
) -> ModelArtifact:
    """Everything a version needs to score a planned attempt (deepsummit/contracts/artifact.py)."""
    inputs = data.preprocessor.inputs
    return ModelArtifact(
        networks=[r.model for r in results],
        seeds=[r.seed for r in results],
        preprocessor=data.preprocessor,
        calibrator=comparison.calibrators[TRANSFORMER],
        history=load_history(data.directory),
        drift_reference=DistributionProfile.from_json(
            (data.directory / DRIFT_PROFILE_FILE).read_text()
        ),
        metadata={
            "weather_source": data.preprocessor.weather_source,
            "inputs": list(inputs.names),
            "inputs_known_by": inputs.latest_known.value,
            "train_until": settings.features.split.train_until,
            "features_digest": data.digest,
        },
    )


def planned_example(data: TrainingData) -> pd.DataFrame:
    """A few test rows as a user asks for them: the registered model's input example."""
    planned = pl.read_parquet(data.directory / PLANNED_TEST_FILE)
    return planned.head(EXAMPLE_ROWS).drop(KEY_COLUMNS).to_pandas()


def gate_version(
    settings: Settings,
    context: RunContext,
    data: TrainingData,
    version: str,
    calibrated: dict[str, np.ndarray],
) -> GateDecision:
    """The champion gate on the test rows (one gate at a time: one champion)."""
    predictions = (
        data.rows["test"]
        .select("expid", "member_id", "year", "label")
        .with_columns(probability=pl.Series(calibrated[TRANSFORMER]))
    )
    with context.exclusive(REGISTRY):
        decision = gate(
            MlflowClient(settings.mlflow.tracking_uri),
            settings.mlflow,
            Candidate(
                version=version,
                test_digest=data.test_digest,
                weather_source=data.preprocessor.weather_source,
                inputs_known_by=data.preprocessor.inputs.latest_known,
                predictions=predictions,
                test_input=pl.read_parquet(data.directory / PLANNED_TEST_FILE),
            ),
        )
    mlflow.set_tags(
        {
            "model_version": version,
            "champion_decision": "promoted" if decision.promoted else "challenger",
            "champion_reason": decision.reason,
        }
    )
    return decision


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


def compare_with_seeds(
    models: list[ModelPredictions],
    results: list[TrainResult],
    arrays: dict[str, FeatureArrays],
    test_groups: np.ndarray,
    calibration: Method,
) -> Comparison:
    """The models compared on the test rows (deepsummit/train/comparison.py), the transformer's
    seeds' spread beside them."""
    comparison = compare(
        models, arrays["validation"].label, arrays["test"].label, test_groups, calibration
    )
    calibrator = comparison.calibrators[TRANSFORMER]
    return dataclasses.replace(comparison, seeds=seed_spread(results, arrays, calibrator))


def seed_spread(
    results: list[TrainResult], arrays: dict[str, FeatureArrays], calibrator: Calibrator
) -> SeedSpread:
    """Each seed's validation and test AUC, and the mean width of their calibrated band on the
    test rows (what `predict` shows as the band)."""
    ones = np.ones((1, len(arrays["test"])))
    networks = [r.model for r in results]
    test = calibrator.probabilities(seed_logits(networks, arrays["test"].model_inputs()))
    return SeedSpread(
        tuple(r.seed for r in results),
        tuple(r.best_val_auc for r in results),
        tuple(float(weighted_auc(arrays["test"].label, p, ones)[0]) for p in test),
        float((test.max(0) - test.min(0)).mean()),
    )


def replace_seed(train_config: TrainConfig, seed: int) -> TrainConfig:
    return train_config.model_copy(update={"seed": seed})


def transformer_predictions(
    results: list[TrainResult], arrays: dict[str, FeatureArrays]
) -> ModelPredictions:
    """The ensemble's probabilities (the seeds' mean logit) on validation and test, with its
    cost."""
    networks = [r.model for r in results]

    def ensemble(rows: FeatureArrays) -> np.ndarray:
        mean = seed_logits(networks, rows.model_inputs()).mean(axis=0)
        return 1.0 / (1.0 + np.exp(-mean.astype(np.float64)))

    started = time.perf_counter()
    test = ensemble(arrays["test"])
    per_1000 = (time.perf_counter() - started) / max(1, len(arrays["test"])) * 1000
    return ModelPredictions(
        TRANSFORMER,
        ensemble(arrays["validation"]),
        test,
        sum(r.seconds for r in results),
        per_1000,
        ensemble,
    )


def _calibrated_test(
    comparison: Comparison, models: list[ModelPredictions]
) -> dict[str, np.ndarray]:
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
    first: TrainResult,
) -> None:
    """ROC, reliability before and after calibration, and the first seed's learning
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
        first.history,
    )
