"""Arrays with a learnable signal, for the trainer and the baselines alone: the label depends on
one numeric feature, one category and the attempt day's first weather channel, so a model that
learns anything scores well above AUC 0.5, a broken one exactly 0.5. NumPy and the project's
contracts only, so the CUDA tests run on a bare GPU machine too."""

from __future__ import annotations

from typing import Any

import numpy as np

from deepsummit.contracts.arrays import FeatureArrays
from deepsummit.core.inputs import SPEC_INPUT_SET, WEATHER_CHANNELS, WEATHER_TOKENS

CARDINALITIES: tuple[int, ...] = (6, 5, 4, 5, 3, 4)
# What the spec's 20 tokens and these vocabularies fix of the model (Preprocessor.model_dimensions).
DIMENSIONS: dict[str, Any] = {
    "n_numeric": len(SPEC_INPUT_SET.numeric),
    "n_binary": len(SPEC_INPUT_SET.binary),
    "categorical_cardinalities": CARDINALITIES,
    "n_weather_vars": len(WEATHER_CHANNELS),
}


def synthetic_arrays(n: int, seed: int) -> FeatureArrays:
    rng = np.random.default_rng(seed)
    numeric = rng.normal(size=(n, len(SPEC_INPUT_SET.numeric))).astype(np.float32)
    numeric_missing = rng.random(numeric.shape) < 0.1
    numeric[numeric_missing] = 0.0
    categorical = np.stack([rng.integers(0, size, n) for size in CARDINALITIES], axis=1)
    binary = rng.integers(0, 2, (n, len(SPEC_INPUT_SET.binary)))
    binary_missing = rng.random(binary.shape) < 0.05
    binary[binary_missing] = 0
    weather = rng.normal(size=(n, WEATHER_TOKENS, len(WEATHER_CHANNELS))).astype(np.float32)
    weather_missing = np.zeros_like(weather, dtype=bool)
    days_before = np.tile(np.arange(WEATHER_TOKENS, dtype=np.float32)[::-1], (n, 1))
    day_of_year = np.tile(rng.integers(1, 366, (n, 1)), (1, WEATHER_TOKENS)).astype(np.float32)
    signal = 3.0 * numeric[:, 0] + 2.0 * (categorical[:, 0] == 1) - 2.0 * weather[:, 6, 0]
    label = (rng.random(n) < 1 / (1 + np.exp(-signal))).astype(np.float32)
    return FeatureArrays(
        numeric=numeric,
        numeric_missing=numeric_missing,
        categorical=categorical.astype(np.int64),
        binary=binary.astype(np.int64),
        binary_missing=binary_missing,
        weather=weather,
        weather_missing=weather_missing,
        days_before=days_before,
        day_of_year=day_of_year,
        label=label,
    )
