"""The trees' view of the model-ready arrays, and a fitted tree as a registered version holds it.

Both the train stage (deepsummit/train/baselines.py fits the trees) and serving (a served blend
answers with one: deepsummit/contracts/blend.py) read the same rows the same way, so the matrix
lives here, below both.

A tree is saved in its library's own model format (CatBoost's `.cbm`, LightGBM's text model),
which loads without unpickling any Python object. The libraries (and pandas, which both import)
are imported where a tree is read or asked: a version that serves the transformer alone loads
without them, and `predict` in its own process starts that much sooner.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from deepsummit.contracts.arrays import FeatureArrays

if TYPE_CHECKING:
    import catboost
    import lightgbm as lgb
    import pandas as pd

ATTEMPT_DAY_TOKEN = 6  # the daily token of day D (tokens 0–6 are D-6 … D)
LIGHTGBM, CATBOOST = "LightGBM", "CatBoost"
SUFFIX = {LIGHTGBM: ".txt", CATBOOST: ".cbm"}


def tree_matrix(arrays: FeatureArrays, weather: bool = True) -> np.ndarray:
    """The trees' matrix: NaN where a value is missing, the categoricals as integer codes, the
    weather window flattened (`weather`), and the attempt day's day of the year."""
    n = len(arrays)
    numeric = np.where(arrays.numeric_missing, np.nan, arrays.numeric)
    binary = np.where(arrays.binary_missing, np.nan, arrays.binary.astype(np.float32))
    window = np.where(arrays.weather_missing, np.nan, arrays.weather).reshape(n, -1)
    day_of_year = arrays.day_of_year[:, ATTEMPT_DAY_TOKEN : ATTEMPT_DAY_TOKEN + 1]
    parts = [numeric, arrays.categorical, binary, *([window] if weather else []), day_of_year]
    return np.hstack(parts).astype(np.float32)


def categorical_columns(arrays: FeatureArrays) -> list[int]:
    first = arrays.numeric.shape[1]
    return list(range(first, first + arrays.categorical.shape[1]))


def catboost_frame(arrays: FeatureArrays, weather: bool = True) -> pd.DataFrame:
    """The trees' matrix as CatBoost reads it: the categorical columns as integers."""
    import pandas as pd

    frame = pd.DataFrame(tree_matrix(arrays, weather))
    for position, column in enumerate(categorical_columns(arrays)):
        frame[column] = arrays.categorical[:, position]
    return frame


def tree_probability(
    library: str, model: catboost.CatBoostClassifier | lgb.Booster, arrays: FeatureArrays,
    weather: bool,
) -> np.ndarray:  # fmt: skip
    """(N,) one fitted tree's probability of a summit on `arrays`."""
    if library == CATBOOST:
        return model.predict_proba(catboost_frame(arrays, weather))[:, 1]
    return model.predict(tree_matrix(arrays, weather))


@dataclass(frozen=True)
class SavedTrees:
    """One tree library's models, one per seed, fitted at the same rounds: their answer is their
    mean probability (as the protocol judges them: deepsummit/train/baseline_protocol.py)."""

    library: str  # LIGHTGBM or CATBOOST
    weather: bool  # whether the matrix carries the weather window
    models: tuple[catboost.CatBoostClassifier | lgb.Booster, ...]

    def probability(self, arrays: FeatureArrays) -> np.ndarray:
        return np.mean(
            [tree_probability(self.library, m, arrays, self.weather) for m in self.models], axis=0
        )

    def save(self, directory: Path) -> list[str]:
        """Each model in its library's format under `directory`; their file names."""
        directory.mkdir(parents=True, exist_ok=True)
        names = []
        for index, model in enumerate(self.models):
            path = directory / f"tree-{index}{SUFFIX[self.library]}"
            model.save_model(str(path))
            names.append(path.name)
        return names

    @classmethod
    def load(cls, library: str, weather: bool, directory: Path, names: list[str]) -> SavedTrees:
        if library not in SUFFIX:
            raise ValueError(f"no tree library {library!r} (known: {', '.join(SUFFIX)})")
        import catboost
        import lightgbm as lgb

        models = []
        for name in names:
            path = str(directory / name)
            if library == CATBOOST:
                models.append(catboost.CatBoostClassifier().load_model(path))
            else:
                models.append(lgb.Booster(model_file=path))
        return cls(library, weather, tuple(models))
