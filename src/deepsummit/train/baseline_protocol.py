"""The baselines through the protocol every model goes through (docs/evaluation.md#the-protocol),
for one held-out check: the train stage's test split, or a backtest fold.

For each baseline:
1. **Count.** A tree's rounds are counted by early stopping on validation rows of the kind the
   check scores (`Stopping`): the member check's members where the held-out rows are members'
   own records, else the newest years of expedition records before them; it trains on the
   seasons before those years.
2. **Map.** The map (the recipe's: `train.calibration` with its member-group shifts) is fitted
   on the member check as the transformer's is: on the answers of the baseline trained, with
   that count, on the seasons before the check's years.
3. **Refit.** It is trained again on every season before the held-out ones with that count,
   once per seed (`baselines.seeds`, as many as the transformer's ensemble members), and answers
   their mean probability through the map.

The settings themselves (learning rate, depth, …) are chosen before every scored season by
bench/studies/which_tree_settings.py; nothing here looks at the held-out rows.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import polars as pl

from deepsummit.contracts.arrays import FeatureArrays
from deepsummit.contracts.calibration import Calibrator
from deepsummit.contracts.preprocessing import Preprocessor
from deepsummit.core.baseline_sections import BaselinesConfig
from deepsummit.core.errors import PipelineError
from deepsummit.core.sections import TrainConfig
from deepsummit.model.config import ModelConfig
from deepsummit.train.baselines import (
    LOGISTIC,
    Fit,
    Fitted,
    ModelPredictions,
    Predictor,
    baseline_fits,
)
from deepsummit.train.comparison import logit
from deepsummit.train.recipe import (
    CheckInputs,
    fit_calibrator,
    preprocessing_for,
    record_years,
    training_arrays,
)
from deepsummit.train.trainer import training_slice


@dataclass(frozen=True)
class Stopping:
    """The validation rows that count a tree's rounds: `kind` rows ("member" or "expedition")
    of `years`, and the seasons before them, read through preprocessing learnt from those."""

    kind: str
    years: tuple[int, ...]
    train: FeatureArrays
    validation: FeatureArrays
    cardinalities: tuple[int, ...]


def scored_kind(held_out: pl.DataFrame) -> str:
    """The kind of record most of the held-out rows are: what the check mostly scores."""
    expeditions = int((held_out["record"] == "expedition").sum())
    return "expedition" if 2 * expeditions > held_out.height else "member"


def stopping_rows(
    rows: pl.DataFrame,
    windows: pl.DataFrame,
    template: Preprocessor,
    held_out: pl.DataFrame,
    check: CheckInputs,
    train_config: TrainConfig,
) -> Stopping:
    """The `Stopping` of a check answering `held_out`, trained on the `rows` before them: the
    member check's own rows for member seasons; for expedition seasons, the expedition records
    of the `train.member_check_years` newest years before them that hold any."""
    kind = scored_kind(held_out)
    if kind == "member":
        return Stopping(
            kind,
            check.years,
            check.arrays["train"],
            check.member_arrays,
            check.preprocessor.categorical_cardinalities,
        )
    cutoff = int(held_out["year"].min()) - 1
    years = record_years(rows, cutoff, train_config.member_check_years, "expedition")
    if not years:
        raise PipelineError(f"no expedition records at or before {cutoff} to count rounds on")
    before = rows.filter(pl.col("year") < years[0])
    judged = rows.filter(pl.col("year").is_in(years) & (pl.col("record") == "expedition"))
    preprocessor = preprocessing_for(template, before, windows)
    return Stopping(
        kind,
        years,
        training_arrays(preprocessor, before, windows, train_config),
        preprocessor.transform(judged, windows),
        preprocessor.categorical_cardinalities,
    )


def baseline_seeds(config: BaselinesConfig, model: ModelConfig, training: TrainConfig) -> int:
    """How many seeds each tree is refit with: the setting, else the transformer's number of
    ensemble members (its seeds × members per network)."""
    return config.seeds or training.seeds * model.ensemble_size


def run_baselines(
    train: FeatureArrays,
    test: FeatureArrays,
    cardinalities: tuple[int, ...],
    stopping: Stopping,
    check: CheckInputs,
    config: BaselinesConfig,
    train_config: TrainConfig,
    seeds: int,
) -> list[ModelPredictions]:
    """Every baseline counted, mapped and refit (see the module docstring) on `train`, read
    through the preprocessing whose vocabularies are `cardinalities`, answering `test`. The
    training settings give the seed, the threads and the rows' slice (`max_train_rows`)."""

    def sliced(arrays: FeatureArrays) -> FeatureArrays:
        return training_slice(arrays, train_config.max_train_rows, train_config.seed)

    threads = train_config.num_threads
    fits = {
        "stopping": baseline_fits(config, stopping.cardinalities, threads),
        "check": baseline_fits(config, check.preprocessor.categorical_cardinalities, threads),
        "refit": baseline_fits(config, cardinalities, threads),
    }
    models = []
    for name in fits["refit"]:
        started = time.perf_counter()
        seed = train_config.seed
        rounds = None
        if name != LOGISTIC:
            counted = fits["stopping"][name](
                sliced(stopping.train), seed, None, stopping.validation
            )
            rounds = counted.rounds
        if rounds is not None and stopping.kind == "member":
            checked = counted  # trained on the check's own seasons before, at that count
        else:
            checked = fits["check"][name](sliced(check.arrays["train"]), seed, rounds, None)
        on_check = checked.probability(check.member_arrays)
        calibrator = fit_calibrator(train_config, logit(on_check), check.members)
        predict = _refit(fits["refit"][name], sliced(train), seed, rounds, seeds if rounds else 1)
        seconds = time.perf_counter() - started
        models.append(_judged(name, predict, test, seconds, calibrator, rounds or 0, on_check))
    return models


def _refit(fit: Fit, train: FeatureArrays, seed: int, rounds: int | None, seeds: int) -> Predictor:
    """`fit` trained once per seed; their mean probability."""
    members: list[Fitted] = [fit(train, seed + offset, rounds, None) for offset in range(seeds)]

    def predict(arrays: FeatureArrays) -> np.ndarray:
        # No rows to score (a fold whose seasons have no push-day candidates, e.g. 2020's): an
        # empty answer, where sklearn would refuse the empty matrix.
        if not len(arrays):
            return np.empty(0)
        return np.mean([member.probability(arrays) for member in members], axis=0)

    return predict


def _judged(
    name: str,
    predict: Predictor,
    test: FeatureArrays,
    seconds: float,
    calibrator: Calibrator,
    rounds: int,
    on_check: np.ndarray,
) -> ModelPredictions:
    """The refit model's answer on `test`, with its cost."""
    started = time.perf_counter()
    answers = predict(test)
    per_1000 = (time.perf_counter() - started) / max(1, len(test)) * 1000
    return ModelPredictions(name, answers, seconds, per_1000, predict, calibrator, rounds, on_check)
