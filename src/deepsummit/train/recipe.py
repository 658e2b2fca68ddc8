"""The training recipe: what trains the transformer, for the train stage, the backtest and the
benches alike.

A recipe is an architecture and its training settings (`Recipe`). It trains once per seed
(`train_seeds`), each training resumable from its own checkpoint folder, with the training rows
weighted by recency when the settings ask (`training_arrays`); it refits on every season through
the newest for the epochs an evaluation kept (`refit`); and its answer on a split is the mean
probability of every ensemble member of every seed (`transformer_predictions`).

It logs nothing on its own: a caller that wants each epoch recorded (the train stage, in its
MLflow run) passes an `EpochLog`.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from deepsummit.contracts.arrays import FeatureArrays
from deepsummit.contracts.calibration import Calibrator
from deepsummit.contracts.preprocessing import Preprocessor
from deepsummit.core.config import Settings
from deepsummit.core.context import Progress, no_progress
from deepsummit.core.errors import PipelineError
from deepsummit.core.seasons import newest_season
from deepsummit.core.sections import MlflowConfig, TrainConfig
from deepsummit.model.config import ModelConfig
from deepsummit.serve.inference import ensemble_logit, ensemble_probability, member_logits
from deepsummit.train.baselines import ModelPredictions
from deepsummit.train.checkpoint import EpochRecord
from deepsummit.train.comparison import TRANSFORMER
from deepsummit.train.trainer import TrainingSummary, TrainResult, train_model

# An epoch's record and the prefix its metrics carry ("seed_42_", "refit_seed_42_").
EpochLog = Callable[[EpochRecord, str], None]


@dataclass(frozen=True)
class Recipe:
    """The architecture and how it is trained: a profile's `model` and `train` sections; and
    the MLflow tracking server each training's checkpoint is uploaded to (None: it stays on
    this disk), so a training rescheduled elsewhere resumes (deepsummit/train/trainer.py)."""

    architecture: ModelConfig
    training: TrainConfig
    upload_checkpoints_to: MlflowConfig | None = None

    @classmethod
    def of(cls, settings: Settings, upload_checkpoints: bool = False) -> Recipe:
        """The profile's recipe; with `upload_checkpoints`, its trainings' checkpoints go to
        the settings' tracking server too (`train.checkpoint_upload_every`)."""
        return cls(settings.model, settings.train, settings.mlflow if upload_checkpoints else None)

    def with_training(self, **changes: Any) -> Recipe:
        """The same recipe with some training settings changed (threads, seed)."""
        return dataclasses.replace(self, training=self.training.model_copy(update=changes))


def training_arrays(
    preprocessor: Preprocessor, rows: pl.DataFrame, windows: pl.DataFrame, config: TrainConfig
) -> FeatureArrays:
    """`rows` as a recipe trains on them: read through `preprocessor`, each weighted by how
    recent its year is: w = 0.5^((newest − year) / half-life), so the model's base rate follows
    the newest seasons (`train.recency_half_life`; None: equal weights). The weights are scaled
    to average 1, keeping the loss's scale."""
    arrays = preprocessor.transform(rows, windows)
    if config.recency_half_life is None:
        return arrays
    years = rows["year"].to_numpy()
    age = years.max() - years
    weights = 0.5 ** (age / config.recency_half_life)
    return dataclasses.replace(arrays, weight=(weights / weights.mean()).astype(np.float32))


def train_seeds(
    recipe: Recipe,
    arrays: dict[str, FeatureArrays | None],
    dimensions: dict[str, Any],
    checkpoints: Path,
    progress: Progress = no_progress,
    epoch_log: EpochLog | None = None,
    epochs: dict[int, int] | None = None,
) -> list[TrainResult]:
    """The transformer trained once per seed (seed, seed + 1, …), each resumable from its own
    checkpoint folder; every epoch goes to `epoch_log` under `seed_<s>_` (none: nowhere) and is
    counted in `progress` (epochs of all seeds; early stopping may end a seed sooner).
    `arrays["validation"]` None: nothing is judged, and each seed trains the epochs `epochs`
    names for it (deepsummit/train/trainer.py)."""
    config = recipe.training
    results = []
    for offset in range(config.seeds):
        seed = config.seed + offset
        results.append(
            train_model(
                replace_seed(config, seed),
                recipe.architecture,
                arrays["train"],
                arrays["validation"],
                dimensions,
                checkpoints / f"seed-{seed}",
                epoch_reporter(config, offset, progress, epoch_log),
                epochs=None if epochs is None else epochs[seed],
                upload_to=recipe.upload_checkpoints_to,
            )
        )
    if epoch_log is not None:
        for result in results:
            for record in result.history[: result.resumed_from_epoch]:
                epoch_log(record, f"seed_{result.seed}_")  # epochs done before a crash
    return results


def epoch_reporter(
    train_config: TrainConfig,
    offset: int,
    progress: Progress,
    epoch_log: EpochLog | None,
) -> Callable[[EpochRecord], None]:
    """What `train_seeds` does at the end of each epoch of seed `train_config.seed + offset`:
    log it under `seed_<s>_` and count it among the epochs of all seeds."""
    seed = train_config.seed + offset
    planned = train_config.seeds * train_config.max_epochs

    def report(record: EpochRecord) -> None:
        if epoch_log is not None:
            epoch_log(record, f"seed_{seed}_")
        judged = "" if math.isnan(record.val_auc) else f": validation AUC {record.val_auc:.4f}"
        progress(
            offset * train_config.max_epochs + record.epoch,
            planned,
            f"seed {seed} ({offset + 1} of {train_config.seeds}), epoch {record.epoch} of "
            f"{train_config.max_epochs}{judged}",
        )

    return report


def report_epochs(
    results: list[TrainResult],
    train_config: TrainConfig,
    progress: Progress,
    epoch_log: EpochLog | None,
) -> None:
    """The epochs of trainings that ran where nothing could be reported (a refit in a process
    of its own), reported as `train_seeds` would have."""
    for offset, result in enumerate(results):
        report = epoch_reporter(train_config, offset, progress, epoch_log)
        for record in result.history:
            report(record)


def replace_seed(train_config: TrainConfig, seed: int) -> TrainConfig:
    return train_config.model_copy(update={"seed": seed})


def prefixed(epoch_log: EpochLog | None, prefix: str) -> EpochLog | None:
    """`epoch_log` with its metrics' names under `prefix` ("refit_" → "refit_seed_42_…")."""
    if epoch_log is None:
        return None
    return lambda record, seed_prefix: epoch_log(record, f"{prefix}{seed_prefix}")


@dataclass(frozen=True)
class Refit:
    """The recipe trained on every season of some rows (through the newest of them): the
    registered model when the rows are every season there is, and the answer of a held-out
    check when they stop before the seasons it judges."""

    results: list[TrainResult]
    preprocessor: Preprocessor  # fitted on those rows
    rows: int
    trained_through: str  # the newest season it learnt from, e.g. "2025 Spring"

    def logits(self, rows: pl.DataFrame, windows: pl.DataFrame) -> np.ndarray:
        """Every ensemble member's logit on `rows` (members × rows)."""
        inputs = self.preprocessor.transform(rows, windows).model_inputs()
        return member_logits([r.model for r in self.results], inputs)


def preprocessing_for(
    template: Preprocessor, rows: pl.DataFrame, windows: pl.DataFrame
) -> Preprocessor:
    """The preprocessing of `template` (its settings: weather source, thresholds, inputs)
    learnt anew from `rows`: what a recipe trained on them reads."""
    return template.refit(rows, windows, trained_on=f"every season through {newest_season(rows)}")


def refit(
    recipe: Recipe,
    rows: pl.DataFrame,
    windows: pl.DataFrame,
    preprocessor: Preprocessor,
    epochs: dict[int, int],
    checkpoints: Path,
    progress: Progress = no_progress,
    epoch_log: EpochLog | None = None,
) -> Refit:
    """Each seed trained on `rows` for the epochs the recipe trains (`epochs`: seed → epochs;
    the same schedule, so the same steps of it), reading them through `preprocessor` (learnt
    from them: `preprocessing_for`). Nothing is held out, so nothing is judged here."""
    arrays = training_arrays(preprocessor, rows, windows, recipe.training)
    return refit_arrays(
        recipe, arrays, preprocessor, newest_season(rows), epochs, checkpoints, progress, epoch_log
    )


def refit_arrays(
    recipe: Recipe,
    train: FeatureArrays,
    preprocessor: Preprocessor,
    trained_through: str,
    epochs: dict[int, int],
    checkpoints: Path,
    progress: Progress = no_progress,
    epoch_log: EpochLog | None = None,
) -> Refit:
    """`refit` of rows already read through `preprocessor` (and weighted by recency)."""
    results = train_seeds(
        recipe,
        {"train": train, "validation": None},
        preprocessor.model_dimensions(),
        checkpoints,
        progress,
        epoch_log,
        epochs=epochs,
    )
    return Refit(results, preprocessor, results[0].train_rows, trained_through)


def record_years(
    rows: pl.DataFrame, cutoff: int, count: int, record: str = "member"
) -> tuple[int, ...]:
    """The `count` newest years, at or before `cutoff`, of rows of `record`'s kind ("member":
    members' own records; "expedition": expedition records)."""
    years = rows.filter((pl.col("record") == record) & (pl.col("year") <= cutoff))["year"]
    return tuple(sorted(years.unique().to_list())[-count:])


@dataclass(frozen=True)
class MemberCheck:
    """The recipe judged on the newest seasons of members' own records before a cutoff,
    trained on the seasons before them. Each member's own outcome is known there, so the map
    from the network's logit to the answer is fitted on these rows (an expedition record gives
    its members one P while their outcomes differ, which would pull every answer toward 0.5);
    and a recipe that keeps its best epoch counts its epochs here."""

    years: tuple[int, ...]
    rows: pl.DataFrame  # the member rows of `years`
    logits: np.ndarray  # every ensemble member's logit on them (members × rows)
    trainings: tuple[TrainingSummary, ...]

    def epochs(self, config: TrainConfig) -> dict[int, int]:
        """Seed → the epochs the recipe trains: those this check kept, or the whole schedule
        for a recipe that keeps its last."""
        if config.keep == "best":
            return {t.seed: t.best_epoch for t in self.trainings}
        return {t.seed: config.max_epochs for t in self.trainings}

    def calibrator(self, config: TrainConfig) -> Calibrator:
        """The map the recipe's answers go through, fitted on every row of the check."""
        return fit_calibrator(config, ensemble_logit(self.logits), self.rows)

    def out_of_fold(self, config: TrainConfig) -> np.ndarray:
        """The answers on the check's rows, each year's through a map fitted on the other
        years: what the map does to rows it was not fitted on."""
        return out_of_fold_answers(config, ensemble_logit(self.logits), self.rows)


def out_of_fold_answers(config: TrainConfig, logit: np.ndarray, rows: pl.DataFrame) -> np.ndarray:
    """A model's answers on member `rows` (its `logit` on them), each year's through the
    recipe's map fitted on the other years."""
    years = rows["year"].to_numpy()
    answers = np.empty(len(logit))
    for year in np.unique(years):
        held = years == year
        fitted = fit_calibrator(config, logit[~held], rows.filter(pl.Series(~held)))
        answers[held] = fitted.probabilities(logit[held], rows.filter(pl.Series(held)))
    return answers


def fit_calibrator(config: TrainConfig, logit: np.ndarray, rows: pl.DataFrame) -> Calibrator:
    """The recipe's map (`train.calibration`, shifting `train.calibration_shifts_by`) fitted on
    the ensemble's `logit` of member `rows` and their labels."""
    return Calibrator.fit(
        config.calibration,
        logit,
        rows["label"].cast(pl.Float64).to_numpy(),
        rows,
        config.calibration_shifts_by,
        config.calibration_shift_penalty,
    )


@dataclass(frozen=True)
class CheckInputs:
    """What a member check trains on and answers: the years before the check's, the check's
    years (all their rows: what early stopping reads) and their member rows."""

    years: tuple[int, ...]
    members: pl.DataFrame  # the member rows of `years`
    preprocessor: Preprocessor  # learnt from the years before them
    arrays: dict[str, FeatureArrays]  # "train" (recency-weighted), "validation"
    member_arrays: FeatureArrays


def check_inputs(
    recipe: Recipe, rows: pl.DataFrame, windows: pl.DataFrame, template: Preprocessor, cutoff: int
) -> CheckInputs:
    """The inputs of the check for a model trained through `cutoff`: the
    `training.member_check_years` newest years of members' own records at or before it."""
    years = record_years(rows, cutoff, recipe.training.member_check_years)
    if not years:
        raise PipelineError(f"no member records at or before {cutoff}: nothing to calibrate on")
    before = rows.filter(pl.col("year") < years[0])
    judged = rows.filter(pl.col("year").is_in(years))
    members = judged.filter(pl.col("record") == "member")
    preprocessor = preprocessing_for(template, before, windows)
    return CheckInputs(
        years,
        members,
        preprocessor,
        {
            "train": training_arrays(preprocessor, before, windows, recipe.training),
            "validation": preprocessor.transform(judged, windows),
        },
        preprocessor.transform(members, windows),
    )


def member_check(
    recipe: Recipe,
    inputs: CheckInputs,
    checkpoints: Path,
    progress: Progress = no_progress,
    epoch_log: EpochLog | None = None,
) -> MemberCheck:
    """The recipe trained on the years before the check's, validated on the check's years, its
    answers kept on their member rows."""
    results = train_seeds(
        recipe,
        inputs.arrays,
        inputs.preprocessor.model_dimensions(),
        checkpoints,
        progress,
        epoch_log,
    )
    logits = member_logits([r.model for r in results], inputs.member_arrays.model_inputs())
    return MemberCheck(
        inputs.years, inputs.members, logits, tuple(TrainingSummary.of(r) for r in results)
    )


def transformer_predictions(results: list[TrainResult], test: FeatureArrays) -> ModelPredictions:
    """The ensemble's probability (its members' mean probability, over every seed) on `test`,
    with its cost."""
    networks = [r.model for r in results]

    def ensemble(rows: FeatureArrays) -> np.ndarray:
        return ensemble_probability(member_logits(networks, rows.model_inputs()))

    started = time.perf_counter()
    answers = ensemble(test)
    per_1000 = (time.perf_counter() - started) / max(1, len(test)) * 1000
    return ModelPredictions(
        TRANSFORMER, answers, sum(r.seconds for r in results), per_1000, ensemble
    )
