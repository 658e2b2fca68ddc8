"""The train stage: features snapshot → a recipe judged out of time, then the model that recipe
trains on every season, registered and gated.

One MLflow run per call: parameters, per-epoch metrics (live), the snapshot as a dataset input.

1. The evaluation. The transformer (its ensemble members; `train.seeds` trainings of them) is
   trained on the train split and validated on the next seasons, and judged with the baselines
   (logistic regression, LightGBM, CatBoost, on identical inputs) on the newest seasons, the test
   split: every model calibrated on the validation split, compared with bootstrap intervals over
   expeditions (deepsummit/train/comparison.py), plots.
2. The refit. The same recipe (architecture, training settings, the epochs the evaluation ran,
   its calibration) trains on every season of the snapshot, through the newest: that is the
   model registered (deepsummit/contracts/artifact.py), and the run records the newest season it
   learnt from (`trained_through`). A recipe that keeps its last epoch refits beside the
   evaluation, in a process of its own (`refit_beside`); one that keeps its best waits for it.
3. The gate compares recipes on held-out rows: the evaluation's test predictions against the
   champion's own (deepsummit/train/registry.py), never a model on rows it learnt from.
"""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import polars as pl
from mlflow import MlflowClient
from mlflow.data.sources import LocalArtifactDatasetSource

from deepsummit.contracts.arrays import FeatureArrays
from deepsummit.contracts.artifact import ModelArtifact
from deepsummit.contracts.monitor import training_profile
from deepsummit.contracts.preprocessing import Preprocessor
from deepsummit.contracts.snapshot import (
    PLANNED_TEST_FILE,
    SNAPSHOT_FILE,
    load_features,
    load_history,
    read_features,
    read_windows,
)
from deepsummit.core.config import Settings, TrainConfig
from deepsummit.core.context import REGISTRY, Progress, RunContext, partial_progress
from deepsummit.core.planned import KEY_COLUMNS
from deepsummit.core.warehouse import frame_digest
from deepsummit.train.baselines import configured_baselines
from deepsummit.train.comparison import TRANSFORMER, Comparison
from deepsummit.train.evaluation import evaluate
from deepsummit.train.expeditions import ExpeditionTable
from deepsummit.train.parallel import refit_beside, side_by_side
from deepsummit.train.recipe import (
    EpochLog,
    Recipe,
    Refit,
    kept_epochs,
    refit,
    report_epochs,
    train_seeds,
    with_recency,
)
from deepsummit.train.registry import Candidate, GateDecision, gate, log_and_register
from deepsummit.train.tracking import (
    TRAINING_RUN,
    bound_requests,
    git_commit,
    guarded_epoch_log,
    training_params,
    training_run,
    ui_links,
    wait_for_tracking,
)
from deepsummit.train.trainer import checkpoint_signature

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
    expeditions: ExpeditionTable | None  # the test split's expedition records, by expedition
    tracking_uri: str
    run_url: str
    model_url: str
    weather_source: str
    digest: str  # the features table's content digest
    test_digest: str
    rows: dict[str, int]  # attempts per split (train: the rows actually trained on), and refit
    seeds: tuple[int, ...]
    best_epochs: tuple[int, ...]  # each seed's best epoch in the evaluation (the refit runs it)
    epochs_run: tuple[int, ...]
    inputs: tuple[str, ...]
    trained_through: str  # the newest season the registered model learnt from

    def epochs_note(self) -> str:
        """ "42, 43, 44 (best epochs 3/4, 4/4, 2/4)": each seed's best epoch of those run."""
        best = ", ".join(f"{b}/{n}" for b, n in zip(self.best_epochs, self.epochs_run, strict=True))
        return f"{', '.join(map(str, self.seeds))} (best epochs {best})"

    def expeditions_markdown(self) -> list[str]:
        """The test split's expedition records judged by expedition, when it has any."""
        if self.expeditions is None:
            return []
        return [
            "Expedition records of the test split, expedition by expedition (each P is its "
            "members' one P; AUC of the expedition's success within each season, Brier score of "
            "its summit fraction, mean P against the members' summit fraction):",
            "",
            self.expeditions.markdown(),
        ]

    def render(self) -> str:
        status = "champion" if self.champion else "challenger"
        return "\n".join(
            [
                f"test split: {self.rows['test']:,} attempts (train {self.rows['train']:,}, "
                f"validation {self.rows['validation']:,}); weather source {self.weather_source}; "
                f"features {self.digest[:12]}; {len(self.inputs)} tabular inputs",
                "",
                self.comparison.markdown(),
                *self.expeditions_markdown(),
                f"registered: seeds {self.epochs_note()}, refit on all {self.rows['refit']:,} "
                f"attempts through {self.trained_through}",
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
    windows: pl.DataFrame  # their weather windows
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
            directory, arrays, preprocessor, snapshot, read_windows(directory), rows,
            frame_digest(snapshot), frame_digest(rows["test"]),
        )  # fmt: skip

    def training_arrays(self, config: TrainConfig) -> dict[str, FeatureArrays]:
        """The splits' arrays, the train split's rows weighted by recency (`with_recency`)."""
        years = self.rows["train"]["year"].to_numpy()
        return {**self.arrays, "train": with_recency(self.arrays["train"], years, config)}

    @property
    def counts(self) -> dict[str, int]:
        return {split: len(arrays) for split, arrays in self.arrays.items()}

    def groups(self, split: str) -> np.ndarray:
        """Each row's expedition: what the bootstrap resamples."""
        return self.rows[split].select(pl.format("{}/{}", "expid", "year")).to_series().to_numpy()


def train_and_register(
    settings: Settings, context: RunContext, features_snapshot: Path
) -> TrainReport:
    """Judge the recipe out of time, refit it on every season, register and gate."""
    data = TrainingData.read(features_snapshot)
    checkpoints = checkpoint_folder(settings, data)
    bound_requests(settings.mlflow)
    wait_for_tracking(settings.mlflow, "before training")
    mlflow.set_tracking_uri(settings.mlflow.tracking_uri)
    experiment = mlflow.set_experiment(settings.mlflow.experiment)
    epochs = 2 * settings.train.seeds * settings.train.max_epochs  # evaluation, then refit
    with training_run(run_tags(settings, context, data)) as run:
        log_inputs(settings, data)
        refit_progress, refit_log = refit_reporting(
            partial_progress(context.progress, epochs // 2, epochs),
            guarded_epoch_log(settings.mlflow),
        )
        recipe = Recipe.of(settings)
        with refit_beside(recipe, data.directory, checkpoints / "refit") as early_refit:
            with side_by_side(settings.train, early_refit is not None) as cores:
                baselines = cores.pool.submit(
                    configured_baselines,
                    data.arrays,
                    data.preprocessor.categorical_cardinalities,
                    cores.baselines,
                )
                results = train_seeds(
                    Recipe(settings.model, cores.transformer),
                    data.training_arrays(settings.train),
                    data.preprocessor.model_dimensions(),
                    checkpoints,
                    partial_progress(context.progress, 0, epochs),
                    guarded_epoch_log(settings.mlflow),
                )
                baseline_models = baselines.result()
            comparison, calibrated, expeditions = evaluate(
                data.arrays,
                data.rows["test"],
                data.groups("test"),
                results,
                baseline_models,
                settings.train.calibration,
                settings.backtest,
                context.run_dir,
            )
            if early_refit is None:
                served = refit(
                    recipe,
                    data.snapshot,
                    data.windows,
                    data.preprocessor,
                    kept_epochs(results),
                    checkpoints / "refit",
                    refit_progress,
                    refit_log,
                )
            else:
                served = early_refit.get()
                report_epochs(served.results, settings.train, refit_progress, refit_log)
        mlflow.log_params({"trained_through": served.trained_through, "rows.refit": served.rows})
        artifact = model_artifact(data, served, comparison)
        version = log_and_register(
            settings.mlflow,
            artifact.save(context.run_dir / "model"),
            planned_example(data),
            artifact,
        )
        decision = gate_version(
            settings, context, data, str(version.version), calibrated, served.trained_through
        )
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
        expeditions=expeditions,
        tracking_uri=settings.mlflow.tracking_uri,
        run_url=run_url,
        model_url=model_url,
        weather_source=data.preprocessor.weather_source,
        digest=data.digest,
        test_digest=data.test_digest,
        rows={**data.counts, "train": results[0].train_rows, "refit": served.rows},
        seeds=tuple(r.seed for r in results),
        best_epochs=tuple(r.best_epoch for r in results),
        epochs_run=tuple(len(r.history) for r in results),
        inputs=data.preprocessor.inputs.names,
        trained_through=served.trained_through,
    )


def refit_reporting(progress: Progress, epoch_log: EpochLog) -> tuple[Progress, EpochLog]:
    """`progress` and `epoch_log` for the refit: its progress says so, its metrics are
    `refit_seed_<s>_…`."""
    return (
        lambda done, total, message: progress(done, total, f"refit on every season, {message}"),
        lambda record, prefix: epoch_log(record, f"refit_{prefix}"),
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


def model_artifact(data: TrainingData, served: Refit, comparison: Comparison) -> ModelArtifact:
    """Everything the registered version needs to score a planned attempt
    (deepsummit/contracts/artifact.py): the refit networks and preprocessing, the calibration
    the evaluation chose, the history as of the snapshot's records, and every season's inputs
    as the drift reference."""
    inputs = served.preprocessor.inputs
    return ModelArtifact(
        networks=[r.model for r in served.results],
        seeds=[r.seed for r in served.results],
        preprocessor=served.preprocessor,
        calibrator=comparison.calibrators[TRANSFORMER],
        history=load_history(data.directory),
        drift_reference=training_profile(
            data.snapshot,
            data.windows,
            inputs,
            f"every season through {served.trained_through} of features {data.digest[:12]}",
        ),
        metadata={
            "weather_source": served.preprocessor.weather_source,
            "inputs": list(inputs.names),
            "inputs_known_by": inputs.latest_known.value,
            "trained_through": served.trained_through,
            "evaluated_on": data.preprocessor.extra["split"],
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
    trained_through: str,
) -> GateDecision:
    """The champion gate on the evaluation's held-out test rows (one gate at a time: one
    champion)."""
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
                trained_through=trained_through,
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
