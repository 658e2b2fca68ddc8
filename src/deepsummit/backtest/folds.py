"""Rolling-origin folds over the features snapshot, and each fold's model inputs.

Every fold refits the preprocessing on its own training years (vocabularies and
normalisation), as the features stage does for the single split, so nothing of a fold's
validation or test years reaches its model. The tabular features themselves are leak-free per
attempt (deepsummit/features/tabular.py): each is computed from the seasons before it.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from deepsummit.contracts.arrays import FeatureArrays
from deepsummit.contracts.preprocessing import Preprocessor
from deepsummit.core.config import BacktestConfig
from deepsummit.core.inputs import InputSet

PARTS = ("train", "validation", "test")


@dataclass(frozen=True)
class Fold:
    test_year: int
    validation_years: int

    @property
    def train_until(self) -> int:
        return self.test_year - self.validation_years - 1

    @property
    def name(self) -> str:
        return f"{self.test_year}"

    def part(self, year: pl.Expr) -> pl.Expr:
        """Each row's part of this fold by its year (null: not in the fold)."""
        return (
            pl.when(year <= self.train_until)
            .then(pl.lit("train"))
            .when(year < self.test_year)
            .then(pl.lit("validation"))
            .when(year == self.test_year)
            .then(pl.lit("test"))
        )

    def describe(self) -> str:
        return (
            f"train ≤ {self.train_until}, validation {self.train_until + 1}–"
            f"{self.test_year - 1}, test {self.test_year}"
        )


def rolling_folds(config: BacktestConfig, last_test_year: int) -> list[Fold]:
    """One fold per test year from `config.first_test_year` to `last_test_year`."""
    return [
        Fold(year, config.validation_years)
        for year in range(config.first_test_year, last_test_year + 1)
    ]


@dataclass(frozen=True)
class FoldInputs:
    fold: Fold
    preprocessor: Preprocessor
    rows: dict[str, pl.DataFrame]  # the snapshot's rows of each part
    arrays: dict[str, FeatureArrays]


def fold_inputs(
    fold: Fold,
    features: pl.DataFrame,
    windows: pl.DataFrame,
    template: Preprocessor,
    inputs: InputSet,
) -> FoldInputs:
    """The fold's rows and arrays of `inputs` (every declared input is a column of the
    snapshot), the preprocessing refitted on its training years with the snapshot's settings
    (`template`: weather source, category threshold)."""
    parts = features.with_columns(fold_part=fold.part(pl.col("year")))
    rows = {name: parts.filter(pl.col("fold_part") == name).drop("fold_part") for name in PARTS}
    preprocessor = template.refit(rows["train"], windows, inputs, fold=fold.describe())
    arrays = {name: preprocessor.transform(frame, windows) for name, frame in rows.items()}
    return FoldInputs(fold, preprocessor, rows, arrays)
