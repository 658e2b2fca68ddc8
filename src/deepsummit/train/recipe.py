"""The training recipe: what trains the transformer, for the train stage, the backtest and the
benches alike.

A recipe is an architecture and its training settings (`Recipe`). It trains once per seed
(`train_seeds`), each training resumable from its own checkpoint folder, with the training rows
weighted by recency when the settings ask (`with_recency`); it refits on every season through
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

from deepsummit.contracts.arrays import FeatureArrays, ensemble_probability, member_logits
from deepsummit.contracts.preprocessing import Preprocessor
from deepsummit.core.config import Settings, TrainConfig
from deepsummit.core.context import Progress, no_progress
from deepsummit.core.seasons import newest_season
from deepsummit.model.config import ModelConfig
from deepsummit.train.baselines import ModelPredictions
from deepsummit.train.comparison import TRANSFORMER
from deepsummit.train.trainer import EpochRecord, TrainResult, train_model

# An epoch's record and the prefix its metrics carry ("seed_42_", "refit_seed_42_").
EpochLog = Callable[[EpochRecord, str], None]


@dataclass(frozen=True)
class Recipe:
    """The architecture and how it is trained: a profile's `model` and `train` sections."""

    architecture: ModelConfig
    training: TrainConfig

    @classmethod
    def of(cls, settings: Settings) -> Recipe:
        return cls(settings.model, settings.train)

    def with_training(self, **changes: Any) -> Recipe:
        """The same recipe with some training settings changed (threads, seed)."""
        return dataclasses.replace(self, training=self.training.model_copy(update=changes))


def with_recency(arrays: FeatureArrays, years: np.ndarray, config: TrainConfig) -> FeatureArrays:
    """Rows weighted by how recent their year is: w = 0.5^((newest − year) / half-life), so
    the model's base rate follows the newest seasons (`train.recency_half_life`; None: equal
    weights). The weights are scaled to average 1, keeping the loss's scale."""
    if config.recency_half_life is None:
        return arrays
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
            f"seed {seed} ({offset + 1} of {train_config.seeds}), epoch {record.epoch}{judged}",
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


@dataclass(frozen=True)
class Refit:
    """The evaluated recipe trained on every season of the snapshot: the model registered."""

    results: list[TrainResult]
    preprocessor: Preprocessor  # fitted on every season
    rows: int
    trained_through: str  # the newest season it learnt from, e.g. "2025 Spring"


def refit(
    recipe: Recipe,
    rows: pl.DataFrame,
    windows: pl.DataFrame,
    evaluated: Preprocessor,
    epochs: dict[int, int],
    checkpoints: Path,
    progress: Progress = no_progress,
    epoch_log: EpochLog | None = None,
) -> Refit:
    """Each seed trained again on `rows` (every season through the newest), for the epochs its
    evaluation kept (`epochs`: seed → epochs; the same schedule, so the same steps of it), with
    the evaluation's preprocessing (`evaluated`) refitted on them. Nothing is held out, so
    nothing is judged here: the evaluation judged the recipe."""
    preprocessor = evaluated.refit(rows, windows, trained_on="every season")
    arrays = preprocessor.transform(rows, windows)
    arrays = with_recency(arrays, rows["year"].to_numpy(), recipe.training)
    results = train_seeds(
        recipe,
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
