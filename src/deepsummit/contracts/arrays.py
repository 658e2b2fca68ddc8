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


def to_tensors(inputs: dict[str, np.ndarray], device: torch.device | str = "cpu") -> dict:
    """NumPy model inputs as tensors on `device` (no copy on CPU)."""
    return {name: torch.from_numpy(array).to(device) for name, array in inputs.items()}


def _without_weather(weather_missing: np.ndarray) -> np.ndarray:
    """(N,) bool: the rows none of whose weather tokens has a value."""
    return weather_missing.all(axis=(1, 2))


def batches(
    arrays: FeatureArrays, batch_size: int, seed: int
) -> Iterator[tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]]:
    """Training batches (model inputs, labels, weights) of `batch_size` rows, shuffled in an
    order fixed by `seed`.

    Rows without any weather and rows with some go to separate batches (shuffled within each
    kind, then the batches shuffled together): the model encodes a batch without weather
    without its weather positions, the same logits for half the work. Each batch gathers its
    rows from the whole arrays at once: a per-item Dataset and its collate cost more than a
    small model's forward and backward pass on CPU."""
    inputs = to_tensors(arrays.model_inputs())
    labels, weights = torch.from_numpy(arrays.label), torch.from_numpy(arrays.weight)
    generator = torch.Generator().manual_seed(seed)
    chunks = []
    for kind in (False, True):
        rows = torch.from_numpy(np.flatnonzero(_without_weather(arrays.weather_missing) == kind))
        if len(rows):
            chunks += list(rows[torch.randperm(len(rows), generator=generator)].split(batch_size))
    for index in torch.randperm(len(chunks), generator=generator).tolist():
        rows = chunks[index]
        yield {name: tensor[rows] for name, tensor in inputs.items()}, labels[rows], weights[rows]


def predict_logits(
    model: nn.Module,
    inputs: dict[str, np.ndarray],
    batch_size: int = 1024,
    device: torch.device | None = None,
) -> np.ndarray:
    """The members' logits (k, N) for every row, in eval mode (float32 on any device; default
    CPU); rows without weather are encoded in batches of their own (see `batches`)."""
    device = device or torch.device("cpu")
    model.eval()
    n = len(inputs["numeric"])
    out = np.empty((n, model.config.ensemble_size), dtype=np.float32)
    without_weather = _without_weather(inputs["weather_missing"])
    with torch.inference_mode(), autocast_for(device):
        for kind in (False, True):
            rows = np.flatnonzero(without_weather == kind)
            for start in range(0, len(rows), batch_size):
                chunk = rows[start : start + batch_size]
                batch = to_tensors({k: v[chunk] for k, v in inputs.items()}, device)
                out[chunk] = model(**batch).float().cpu()
    return out.T


# What the band beside every answer is, in the words the CLI and the outlook print.
BAND_MEANING = (
    "the lowest and highest P of the model's ensemble members: how far they disagree, not a "
    "confidence interval"
)


def member_logits(
    networks: Sequence[nn.Module],
    inputs: dict[str, np.ndarray],
    batch_size: int = 1024,
    device: torch.device | None = None,
) -> np.ndarray:
    """(M, N) logits: one row per ensemble member of every network (M = networks × k). The
    model's answer is their mean probability (`ensemble_probability`), their spread its band."""
    return np.concatenate(
        [predict_logits(network, inputs, batch_size, device) for network in networks]
    )


def ensemble_probability(logits: np.ndarray) -> np.ndarray:
    """(M, N) members' logits → (N,) the ensemble's probability: the mean of the members'
    probabilities, as TabM averages its members."""
    return (1.0 / (1.0 + np.exp(-np.asarray(logits, np.float64)))).mean(axis=0)


def ensemble_logit(logits: np.ndarray) -> np.ndarray:
    """(M, N) members' logits → (N,) the logit of the ensemble's probability: what a
    calibration map (deepsummit/contracts/calibration.py) turns into the answer."""
    p = np.clip(ensemble_probability(logits), 1e-7, 1 - 1e-7)
    return np.log(p / (1 - p))


def predict_proba(
    model: nn.Module, arrays: FeatureArrays, batch_size: int = 1024, device: str = "cpu"
) -> np.ndarray:
    """One network's answer on every row of `arrays` (its members' mean probability)."""
    return ensemble_probability(
        predict_logits(model, arrays.model_inputs(), batch_size, torch.device(device))
    )


def autocast_for(device: torch.device) -> torch.autocast:
    if device.type != "cuda":
        return torch.autocast("cpu", enabled=False)
    dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.autocast("cuda", dtype=dtype)
