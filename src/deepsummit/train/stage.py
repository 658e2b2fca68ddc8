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

import dataclasses
import hashlib
import logging
import math
import multiprocessing
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.pool import AsyncResult
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import pandas as pd
import polars as pl
import torch
from mlflow import MlflowClient
from mlflow.data.sources import LocalArtifactDatasetSource
from sklearn.metrics import roc_auc_score
from threadpoolctl import threadpool_limits

from deepsummit.contracts.arrays import FeatureArrays, ensemble_probability, member_logits
from deepsummit.contracts.artifact import ModelArtifact
from deepsummit.contracts.calibration import Calibrator, Method
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
from deepsummit.core.context import (
    REGISTRY,
    Progress,
    RunContext,
    no_progress,
    partial_progress,
)
from deepsummit.core.planned import KEY_COLUMNS, SEASONS
from deepsummit.core.warehouse import frame_digest
from deepsummit.train.baselines import ModelPredictions, configured_baselines
from deepsummit.train.bootstrap import weighted_auc
from deepsummit.train.comparison import TRANSFORMER, Comparison, SeedSpread, compare, logit
from deepsummit.train.evaluation import auc_by_group, plot_calibration, plot_roc
from deepsummit.train.expeditions import ExpeditionTable, expedition_table
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
        with refit_beside(settings, data.directory, checkpoints / "refit") as early_refit:
            with side_by_side(settings.train, early_refit is not None) as cores:
                baselines = cores.pool.submit(
                    configured_baselines,
                    data.arrays,
                    data.preprocessor.categorical_cardinalities,
                    cores.baselines,
                )
                results = train_seeds(
                    cores.transformer,
                    settings.model,
                    data.training_arrays(settings.train),
                    data.preprocessor.model_dimensions(),
                    checkpoints,
                    partial_progress(context.progress, 0, epochs),
                    guarded_epoch_log(settings.mlflow),
                )
                baseline_models = baselines.result()
            comparison, calibrated, expeditions = evaluate(
                settings, data, results, baseline_models, context.run_dir
            )
            if early_refit is None:
                served = refit(
                    settings,
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


@dataclass(frozen=True)
class Refit:
    """The evaluated recipe trained on every season of the snapshot: the model registered."""

    results: list[TrainResult]
    preprocessor: Preprocessor  # fitted on every season
    rows: int
    trained_through: str  # the newest season it learnt from, e.g. "2025 Spring"


def refit(
    settings: Settings,
    rows: pl.DataFrame,
    windows: pl.DataFrame,
    evaluated: Preprocessor,
    epochs: dict[int, int],
    checkpoints: Path,
    progress: Progress = no_progress,
    epoch_log: Callable[[EpochRecord, str], None] = log_epoch,
) -> Refit:
    """Each seed trained again on `rows` (every season through the newest), for the epochs its
    evaluation kept (`epochs`: seed → epochs; the same schedule, so the same steps of it), with
    the evaluation's preprocessing (`evaluated`) refitted on them. Nothing is held out, so
    nothing is judged here: the evaluation judged the recipe."""
    preprocessor = evaluated.refit(rows, windows, trained_on="every season")
    arrays = preprocessor.transform(rows, windows)
    arrays = with_recency(arrays, rows["year"].to_numpy(), settings.train)
    results = train_seeds(
        settings.train,
        settings.model,
        {"train": arrays, "validation": None},
        preprocessor.model_dimensions(),
        checkpoints,
        progress,
        epoch_log,
        epochs=epochs,
    )
    return Refit(results, preprocessor, results[0].train_rows, newest_season(rows))


def kept_epochs(evaluation: list[TrainResult]) -> dict[int, int]:
    """Seed → the epochs its evaluation kept: what the refit trains."""
    return {result.seed: result.best_epoch for result in evaluation}


def refit_reporting(
    progress: Progress, epoch_log: Callable[[EpochRecord, str], None]
) -> tuple[Progress, Callable[[EpochRecord, str], None]]:
    """`progress` and `epoch_log` for the refit: its progress says so, its metrics are
    `refit_seed_<s>_…`."""
    return (
        lambda done, total, message: progress(done, total, f"refit on every season, {message}"),
        lambda record, prefix: epoch_log(record, f"refit_{prefix}"),
    )


def refit_snapshot(settings: Settings, directory: Path, checkpoints: Path) -> Refit:
    """The refit of the snapshot at `directory` for the epochs a recipe that keeps its last
    epoch runs (every seed trains `max_epochs`), reporting nothing: it runs in a process of its
    own (`refit_beside`)."""
    data = TrainingData.read(directory)
    config = settings.train
    epochs = {config.seed + offset: config.max_epochs for offset in range(config.seeds)}
    return refit(
        settings, data.snapshot, data.windows, data.preprocessor, epochs, checkpoints,
        epoch_log=lambda record, prefix: None,
    )  # fmt: skip


@contextmanager
def refit_beside(
    settings: Settings, directory: Path, checkpoints: Path, threads: int | None = None
) -> Iterator[AsyncResult | None]:
    """The refit started at once, in a process of its own, beside the evaluation, when it needs
    nothing from it: a recipe that keeps its last epoch (`train.keep = "last"`, the cpu profile)
    trains every seed `max_epochs` epochs, whatever the validation says. Its own process, because
    torch's random generator is one per process: two trainings in threads would draw each
    other's dropout masks. Yields the pending `Refit` (None where the refit must wait for the
    epochs the evaluation keeps); the process is stopped on the way out. `threads`: torch's in
    the refit (default: `core_split`'s)."""
    if settings.train.keep != "last":
        yield None
        return
    train = settings.train.model_copy(
        update={"num_threads": threads or core_split(settings.train, refit_beside=True).refit}
    )
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        yield pool.apply_async(
            refit_snapshot, (settings.model_copy(update={"train": train}), directory, checkpoints)
        )


@dataclass(frozen=True)
class Cores:
    """Torch threads for the evaluation's transformer and for a refit beside it (0: none); the
    baselines take one core."""

    transformer: int
    refit: int


def core_split(config: TrainConfig, refit_beside: bool) -> Cores:
    """The cores (`train.num_threads`, default torch's) shared out: one to the baselines, the
    rest to the evaluation's transformer, halved with a refit beside it. A second thread
    speeds a `cpu` training step up by a tenth only (0.084 s on one, 0.078 s on two), so on
    two cores each training takes one thread and the baselines' half minute all but vanishes."""
    rest = max(1, (config.num_threads or torch.get_num_threads()) - 1)
    if not refit_beside:
        return Cores(transformer=rest, refit=0)
    return Cores(transformer=max(1, rest - rest // 2), refit=max(1, rest // 2))


@dataclass(frozen=True)
class SideBySide:
    transformer: TrainConfig  # the evaluation's training settings
    baselines: TrainConfig
    pool: Executor  # a thread for the baselines


@contextmanager
def side_by_side(config: TrainConfig, refit_beside: bool = False) -> Iterator[SideBySide]:
    """The evaluation's transformer and the baselines trained at once: the baselines on one
    core in a thread of the returned pool, the transformer on its share of the others
    (`core_split`). Torch's and BLAS's thread counts are back as they were after."""
    threads = torch.get_num_threads()
    cores = core_split(config, refit_beside)
    with (
        threadpool_limits(limits=1, user_api="blas"),  # numpy's BLAS under the baselines
        ThreadPoolExecutor(max_workers=1, thread_name_prefix="baselines") as pool,
    ):
        try:
            yield SideBySide(
                config.model_copy(update={"num_threads": cores.transformer}),
                config.model_copy(update={"num_threads": 1}),
                pool,
            )
        finally:
            torch.set_num_threads(threads)


def newest_season(rows: pl.DataFrame) -> str:
    """ "2025 Spring": the newest (year, season) among `rows`."""
    ranked = (
        rows.select("year", "season")
        .unique()
        .with_columns(
            rank=pl.col("year") * len(SEASONS)
            + pl.col("season").replace_strict(
                {season: i for i, season in enumerate(SEASONS)}, return_dtype=pl.Int64
            )
        )
    )
    year, season, _ = ranked.sort("rank").row(-1)
    return f"{year} {season}"


def with_recency(arrays: FeatureArrays, years: np.ndarray, config: TrainConfig) -> FeatureArrays:
    """Rows weighted by how recent their year is: w = 0.5^((newest − year) / half-life), so
    the model's base rate follows the newest seasons (`train.recency_half_life`; None: equal
    weights). The weights are scaled to average 1, keeping the loss's scale."""
    if config.recency_half_life is None:
        return arrays
    age = years.max() - years
    weights = 0.5 ** (age / config.recency_half_life)
    return dataclasses.replace(arrays, weight=(weights / weights.mean()).astype(np.float32))


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
    settings: Settings,
    data: TrainingData,
    results: list[TrainResult],
    baselines: list[ModelPredictions],
    run_dir: Path,
) -> tuple[Comparison, dict[str, np.ndarray], ExpeditionTable | None]:
    """The transformer and the baselines (trained on identical rows) calibrated the same way,
    compared with intervals; metrics, the comparison, AUC by group and plots logged. Returns
    the comparison, each model's calibrated test probabilities and, where the test split holds
    expedition records, their table by expedition."""
    arrays = data.arrays
    models = [transformer_predictions(results, arrays), *baselines]
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
    expeditions = held_out_expeditions(settings, data.rows["test"], calibrated)
    if expeditions is not None:
        mlflow.log_metrics(expeditions.metrics("test_expeditions_"))
        mlflow.log_text(expeditions.markdown(), "evaluation/expeditions.md")
    mlflow.log_dict(
        _group_aucs(data.rows["test"], arrays["test"].label, calibrated[TRANSFORMER]),
        "evaluation/auc_by_group.json",
    )
    _log_evaluation_plots(run_dir / "plots", arrays, models, calibrated, results[0])
    return comparison, calibrated, expeditions


def held_out_expeditions(
    settings: Settings, test_rows: pl.DataFrame, calibrated: dict[str, np.ndarray]
) -> ExpeditionTable | None:
    """The test split's expedition records judged by expedition (deepsummit/train/
    expeditions.py): their members share one P, so ranking members within them says nothing.
    None when the test split has none."""
    is_record = (test_rows["record"] == "expedition").to_numpy()
    if not is_record.any():
        return None
    rows = test_rows.filter(pl.Series(is_record)).select("expid", "year", "season", "label")
    return expedition_table(
        rows.with_columns(
            **{name: pl.Series(values[is_record]) for name, values in calibrated.items()}
        ),
        tuple(calibrated),
        settings.backtest.min_season_expeditions,
        settings.backtest.unscored_seasons,
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


def train_seeds(
    train_config: TrainConfig,
    hyperparameters: Any,
    arrays: dict[str, FeatureArrays | None],
    dimensions: dict[str, Any],
    checkpoints: Path,
    progress: Progress = no_progress,
    epoch_log: Callable[[EpochRecord, str], None] = log_epoch,
    epochs: dict[int, int] | None = None,
) -> list[TrainResult]:
    """The transformer trained once per seed (seed, seed + 1, …), each resumable from its own
    checkpoint folder; every epoch goes to `epoch_log` under `seed_<s>_` (by default the active
    MLflow run) and is counted in `progress` (epochs of all seeds; early stopping may end a
    seed sooner). `arrays["validation"]` None: nothing is judged, and each seed trains the
    epochs `epochs` names for it (deepsummit/train/trainer.py)."""
    results = []
    for offset in range(train_config.seeds):
        seed = train_config.seed + offset
        results.append(
            train_model(
                replace_seed(train_config, seed),
                hyperparameters,
                arrays["train"],
                arrays["validation"],
                dimensions,
                checkpoints / f"seed-{seed}",
                epoch_reporter(train_config, offset, progress, epoch_log),
                epochs=None if epochs is None else epochs[seed],
            )
        )
    for result in results:
        for record in result.history[: result.resumed_from_epoch]:
            epoch_log(record, f"seed_{result.seed}_")  # epochs done before a crash
    return results


def epoch_reporter(
    train_config: TrainConfig,
    offset: int,
    progress: Progress,
    epoch_log: Callable[[EpochRecord, str], None],
) -> Callable[[EpochRecord], None]:
    """What `train_seeds` does at the end of each epoch of seed `train_config.seed + offset`:
    log it under `seed_<s>_` and count it among the epochs of all seeds."""
    seed = train_config.seed + offset
    planned = train_config.seeds * train_config.max_epochs

    def report(record: EpochRecord) -> None:
        epoch_log(record, f"seed_{seed}_")
        judged = "" if math.isnan(record.val_auc) else f": validation AUC {record.val_auc:.4f}"
        progress(
            offset * train_config.max_epochs + record.epoch,
            planned,
            f"seed {seed} ({offset + 1} of {train_config.seeds}), epoch {record.epoch}{judged}",
        )

    return report


def report_epochs(
    results: list[TrainResult],
    train_config: TrainConfig,
    progress: Progress,
    epoch_log: Callable[[EpochRecord, str], None],
) -> None:
    """The epochs of trainings that ran where nothing could be reported (a refit in a process
    of its own), reported as `train_seeds` would have."""
    for offset, result in enumerate(results):
        report = epoch_reporter(train_config, offset, progress, epoch_log)
        for record in result.history:
            report(record)


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
    """Each seed's validation and test AUC, and the mean width of the band of every member's
    calibrated probability on the test rows (what `predict` shows as the band)."""
    ones = np.ones((1, len(arrays["test"])))
    inputs = arrays["test"].model_inputs()
    per_seed = [ensemble_probability(member_logits([r.model], inputs)) for r in results]
    members = calibrator.probabilities(member_logits([r.model for r in results], inputs))
    return SeedSpread(
        tuple(r.seed for r in results),
        tuple(r.best_val_auc for r in results),
        tuple(float(weighted_auc(arrays["test"].label, p, ones)[0]) for p in per_seed),
        float((members.max(0) - members.min(0)).mean()),
    )


def replace_seed(train_config: TrainConfig, seed: int) -> TrainConfig:
    return train_config.model_copy(update={"seed": seed})


def transformer_predictions(
    results: list[TrainResult], arrays: dict[str, FeatureArrays]
) -> ModelPredictions:
    """The ensemble's probabilities (its members' mean probability, over every seed) on
    validation and test, with its cost."""
    networks = [r.model for r in results]

    def ensemble(rows: FeatureArrays) -> np.ndarray:
        return ensemble_probability(member_logits(networks, rows.model_inputs()))

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
