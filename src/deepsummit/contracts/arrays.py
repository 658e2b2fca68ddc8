"""Model-ready arrays for one split, and the batches a model trains and predicts on.

The field list is the model's forward signature (docs/architecture.md, "Model inputs"); the
features stage writes one `FeatureArrays` per split, training and serving read them back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import torch
from torch import nn

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

    def __post_init__(self) -> None:
        n = len(self.label)
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
        """Every field but the label: the keyword arguments of the model's forward."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "label"}

    def save(self, path: Path) -> None:
        np.savez_compressed(path, **{f.name: getattr(self, f.name) for f in fields(self)})

    @classmethod
    def load(cls, path: Path) -> FeatureArrays:
        with np.load(path, allow_pickle=False) as archive:
            return cls(**{f.name: archive[f.name] for f in fields(cls)})


def to_tensors(inputs: dict[str, np.ndarray], device: torch.device | str = "cpu") -> dict:
    """NumPy model inputs as tensors on `device` (no copy on CPU)."""
    return {name: torch.from_numpy(array).to(device) for name, array in inputs.items()}


def batches(
    arrays: FeatureArrays, batch_size: int, shuffle: bool, seed: int = 0
) -> Iterator[tuple[dict[str, torch.Tensor], torch.Tensor]]:
    """(model inputs, labels) in batches of `batch_size`, in an order fixed by `seed`.

    Each batch gathers its rows from the whole arrays at once: a per-item Dataset and its
    collate cost more than a small model's forward and backward pass on CPU."""
    inputs = to_tensors(arrays.model_inputs())
    labels = torch.from_numpy(arrays.label)
    n = len(labels)
    order = (
        torch.randperm(n, generator=torch.Generator().manual_seed(seed))
        if shuffle
        else torch.arange(n)
    )
    for start in range(0, n, batch_size):
        rows = order[start : start + batch_size]
        yield {name: tensor[rows] for name, tensor in inputs.items()}, labels[rows]


def predict_logits(
    model: nn.Module,
    inputs: dict[str, np.ndarray],
    batch_size: int = 1024,
    device: torch.device | None = None,
) -> np.ndarray:
    """Logits for every row, in batches, in eval mode (float32 on any device; default CPU)."""
    device = device or torch.device("cpu")
    model.eval()
    n = len(inputs["numeric"])
    out = np.empty(n, dtype=np.float32)
    with torch.inference_mode(), autocast_for(device):
        for start in range(0, n, batch_size):
            batch = {k: v[start : start + batch_size] for k, v in inputs.items()}
            out[start : start + batch_size] = model(**to_tensors(batch, device)).float().cpu()
    return out


def seed_logits(
    networks: Sequence[nn.Module], inputs: dict[str, np.ndarray], batch_size: int = 1024
) -> np.ndarray:
    """(S, N) logits: one row per seed's network. The model's answer is their mean (the
    ensemble), their spread is its band."""
    return np.stack([predict_logits(network, inputs, batch_size) for network in networks])


def predict_proba(
    model: nn.Module, arrays: FeatureArrays, batch_size: int = 1024, device: str = "cpu"
) -> np.ndarray:
    logits = predict_logits(model, arrays.model_inputs(), batch_size, torch.device(device))
    return 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))


def autocast_for(device: torch.device) -> torch.autocast:
    if device.type != "cuda":
        return torch.autocast("cpu", enabled=False)
    dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.autocast("cuda", dtype=dtype)
