"""Rolling-origin folds over the features snapshot, each answered as the registered model
answers: by the recipe trained on every season before the fold's test year.

A fold's job holds everything its trainings read and its answers are asked on: the rows before
the test year (through preprocessing learnt from them alone: vocabularies and normalisation),
the test year's rows and push-day candidates, and the member check the map is fitted on
(deepsummit/train/recipe.py: the newest years of members' own records before the test year,
answered by the recipe trained on the years before them). The tabular features themselves are
leak-free per attempt (deepsummit/features/tabular.py): each is computed from the seasons before
it.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from deepsummit.contracts.arrays import FeatureArrays
from deepsummit.contracts.preprocessing import Preprocessor
from deepsummit.core.sections import BacktestConfig
from deepsummit.train.baseline_protocol import Stopping, stopping_rows
from deepsummit.train.recipe import (
    CheckInputs,
    Recipe,
    check_inputs,
    preprocessing_for,
    record_years,
    training_arrays,
)


@dataclass(frozen=True)
class Fold:
    test_year: int

    @property
    def name(self) -> str:
        return f"{self.test_year}"

    def describe(self) -> str:
        return f"trained on every season before {self.test_year}, tested on {self.test_year}"


def rolling_folds(config: BacktestConfig, last_test_year: int) -> list[Fold]:
    """One fold per test year from `config.first_test_year` to `last_test_year`."""
    return [Fold(year) for year in range(config.first_test_year, last_test_year + 1)]


@dataclass(frozen=True)
class FoldJob:
    """What a fold trains on and answers (see the module docstring)."""

    fold: Fold
    before: pl.DataFrame  # every row before the test year
    test_rows: pl.DataFrame  # the test year's rows
    preprocessor: Preprocessor  # learnt from `before`
    arrays: dict[str, FeatureArrays]  # "train" (`before`, recency-weighted), "test"
    day_rows: pl.DataFrame  # the test year's push-day candidates (one per member and day)
    day_arrays: FeatureArrays
    check: CheckInputs
    stopping: Stopping  # the rows the baselines count their rounds on


def cannot_train(fold: Fold, features: pl.DataFrame, recipe: Recipe) -> str | None:
    """Why the fold cannot be trained and scored, or None."""
    before = features.filter(pl.col("year") < fold.test_year)
    if not features.filter(pl.col("year") == fold.test_year).height:
        return "no test rows"
    if before["label"].n_unique() < 2:
        return "the rows before it have fewer than two outcomes"
    years = record_years(features, fold.test_year - 1, recipe.training.member_check_years)
    judged = before.filter(pl.col("year").is_in(years) & (pl.col("record") == "member"))
    trained = before.filter(pl.col("year") < min(years, default=fold.test_year))
    if judged["label"].n_unique() < 2 or trained["label"].n_unique() < 2:
        return "no member check before it (members' own records, and the years before them)"
    return None


def fold_job(
    fold: Fold,
    recipe: Recipe,
    features: pl.DataFrame,
    windows: pl.DataFrame,
    template: Preprocessor,
    day_rows: pl.DataFrame,
    day_windows: pl.DataFrame,
) -> FoldJob:
    """The fold's rows and arrays (`template`: the snapshot's preprocessing, whose settings and
    input set every fold's own preprocessing keeps)."""
    before = features.filter(pl.col("year") < fold.test_year)
    test_rows = features.filter(pl.col("year") == fold.test_year)
    preprocessor = preprocessing_for(template, before, windows)
    check = check_inputs(recipe, features, windows, template, fold.test_year - 1)
    return FoldJob(
        fold,
        before,
        test_rows,
        preprocessor,
        {
            "train": training_arrays(preprocessor, before, windows, recipe.training),
            "test": preprocessor.transform(test_rows, windows),
        },
        day_rows,
        preprocessor.transform(day_rows, day_windows),
        check,
        stopping_rows(before, windows, template, test_rows, check, recipe.training),
    )
