"""Model-ready arrays for one split, and the torch Dataset over them.

The field list is the model's forward signature (docs/architecture.md, "Model inputs"); the
features stage writes one `FeatureArrays` per split, training and serving read them back.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

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


class AttemptDataset(Dataset):
    """One attempt per item: (model inputs as tensors, label)."""

    def __init__(self, arrays: FeatureArrays) -> None:
        self.inputs = to_tensors(arrays.model_inputs())
        self.labels = torch.from_numpy(arrays.label)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        return {name: tensor[index] for name, tensor in self.inputs.items()}, self.labels[index]


def make_loader(arrays: FeatureArrays, batch_size: int, shuffle: bool, seed: int = 0) -> DataLoader:
    """A DataLoader whose shuffling order is fixed by `seed` (reproducible epochs)."""
    generator = torch.Generator().manual_seed(seed)
    return DataLoader(
        AttemptDataset(arrays), batch_size=batch_size, shuffle=shuffle, generator=generator
    )


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
