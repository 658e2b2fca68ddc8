"""Asking networks about model-ready arrays: each network's members' logits, the ensemble's
answer (their mean probability) and its logit (what the calibration map reads), on CPU or
CUDA. Rows without any weather are encoded in batches of their own: the model encodes a batch
without weather without its weather positions, the same logits for half the work.

Training and serving both ask through here; it needs PyTorch and NumPy only (a GPU machine's
image has no Polars: deepsummit/backtest/answers.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import torch
from torch import nn

from deepsummit.contracts.arrays import FeatureArrays


def to_tensors(inputs: dict[str, np.ndarray], device: torch.device | str = "cpu") -> dict:
    """NumPy model inputs as tensors on `device` (no copy on CPU)."""
    return {name: torch.from_numpy(array).to(device) for name, array in inputs.items()}


def without_weather(weather_missing: np.ndarray) -> np.ndarray:
    """(N,) bool: the rows none of whose weather tokens has a value."""
    return weather_missing.all(axis=(1, 2))


def predict_logits(
    model: nn.Module,
    inputs: dict[str, np.ndarray],
    batch_size: int = 1024,
    device: torch.device | None = None,
) -> np.ndarray:
    """The members' logits (k, N) for every row, in eval mode (float32 on any device; default
    CPU); rows without weather are encoded in batches of their own."""
    device = device or torch.device("cpu")
    model.eval()
    n = len(inputs["numeric"])
    out = np.empty((n, model.config.ensemble_size), dtype=np.float32)
    weatherless = without_weather(inputs["weather_missing"])
    with torch.inference_mode(), autocast_for(device):
        for kind in (False, True):
            rows = np.flatnonzero(weatherless == kind)
            for start in range(0, len(rows), batch_size):
                chunk = rows[start : start + batch_size]
                batch = to_tensors({k: v[chunk] for k, v in inputs.items()}, device)
                out[chunk] = model(**batch).float().cpu()
    return out.T


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


@contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """PyTorch's intra-op threads set to `count` inside the block (as they were after it)."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def autocast_for(device: torch.device) -> torch.autocast:
    if device.type != "cuda":
        return torch.autocast("cpu", enabled=False)
    dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.autocast("cuda", dtype=dtype)
