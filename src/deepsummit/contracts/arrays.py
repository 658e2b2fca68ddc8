"""Model-ready arrays for one split.

The field list is the model's forward signature (docs/architecture.md, "Model inputs"); the
features stage writes one `FeatureArrays` per split, training and serving read them back
(deepsummit/serve/inference.py asks a model about them, deepsummit/train/batches.py trains on
them).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from deepsummit.core.inputs import WEATHER_CHANNELS, WEATHER_TOKENS


@dataclass(frozen=True)
class FeatureArrays:
    """N attempts, in the layout the transformer consumes. The tabular widths are the model's
    input set (8 numeric, 6 categorical, 6 binary for the spec's 20 tokens); the weather has
    26 tokens × 16 channels."""

    numeric: np.ndarray  # (N, n_numeric) float32, z-scored; 0.0 where missing
    numeric_missing: np.ndarray  # (N, n_numeric) bool
    categorical: np.ndarray  # (N, n_categorical) int64, 0 = unknown
    binary: np.ndarray  # (N, n_binary) int64, 0/1; 0 where missing
    binary_missing: np.ndarray  # (N, n_binary) bool
    weather: np.ndarray  # (N, 26, 16) float32, z-scored per channel; 0.0 where missing
    weather_missing: np.ndarray  # (N, 26, 16) bool
    days_before: np.ndarray  # (N, 26) float32
    day_of_year: np.ndarray  # (N, 26) float32
    label: np.ndarray  # (N,) float32, 1 = summited
    # (N,) float32: each row's weight in a training loss (a recency weighting); None = 1 each.
    weight: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.label)
        if self.weight is None:
            object.__setattr__(self, "weight", np.ones(n, np.float32))
        numeric, categorical, binary = (
            self.numeric.shape[-1],
            self.categorical.shape[-1],
            self.binary.shape[-1],
        )
        weather = (n, WEATHER_TOKENS, len(WEATHER_CHANNELS))
        expected = {
            "numeric": ((n, numeric), np.float32),
            "numeric_missing": ((n, numeric), np.bool_),
            "categorical": ((n, categorical), np.int64),
            "binary": ((n, binary), np.int64),
            "binary_missing": ((n, binary), np.bool_),
            "weather": (weather, np.float32),
            "weather_missing": (weather, np.bool_),
            "days_before": ((n, WEATHER_TOKENS), np.float32),
            "day_of_year": ((n, WEATHER_TOKENS), np.float32),
            "label": ((n,), np.float32),
            "weight": ((n,), np.float32),
        }
        for name, (shape, dtype) in expected.items():
            array = getattr(self, name)
            if array.shape != shape or array.dtype != dtype:
                raise ValueError(
                    f"FeatureArrays.{name}: expected {shape} {np.dtype(dtype)}, "
                    f"got {array.shape} {array.dtype}"
                )

    def __len__(self) -> int:
        return len(self.label)

    def subset(self, index: np.ndarray | slice) -> FeatureArrays:
        return FeatureArrays(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    def without_weather(self) -> FeatureArrays:
        """The same rows with every weather value missing (what a window without data is)."""
        return dataclasses.replace(
            self,
            weather=np.zeros_like(self.weather),
            weather_missing=np.ones_like(self.weather_missing),
        )

    def model_inputs(self) -> dict[str, np.ndarray]:
        """Every field but the label and the weight: the keyword arguments of the model's
        forward."""
        return {
            f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("label", "weight")
        }

    def save(self, path: Path) -> None:
        np.savez_compressed(path, **{f.name: getattr(self, f.name) for f in fields(self)})

    @classmethod
    def load(cls, path: Path) -> FeatureArrays:
        with np.load(path, allow_pickle=False) as archive:
            return cls(**{f.name: archive[f.name] for f in fields(cls)})
