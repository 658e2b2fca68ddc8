"""One timed training step, shared by bench/model_throughput.py (the CPU) and bench/gpu.py (a
GPU machine, where only torch, NumPy and scikit-learn are at hand): not a bench (`make bench`
skips it)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import torch
from torch import nn

from deepsummit.contracts.arrays import FeatureArrays
from deepsummit.train.batches import batches
from deepsummit.train.trainer import weighted_loss

Batch = tuple[dict[str, torch.Tensor], torch.Tensor]  # model inputs, labels
CPU = torch.device("cpu")


def grouped_batches(arrays: FeatureArrays, batch_size: int, seed: int) -> Iterator[Batch]:
    """The trainer's batches (deepsummit/contracts/arrays.py), without their weights."""
    for inputs, labels, _ in batches(arrays, batch_size, seed):
        yield inputs, labels


def seconds_per_step(
    model: nn.Module,
    draw: Iterator[Batch],
    steps: int,
    warmup: int,
    device: torch.device = CPU,
    precision: str = "fp32",
) -> float:
    """Median seconds of a training step (forward, loss, backward, clipping, AdamW) over
    `steps` batches on `device`, after `warmup` untimed ones (where torch.compile compiles);
    `precision` "bf16" runs the forward under bf16 autocast. A CUDA step is timed to its end."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")
    timings = []
    for index, (inputs, labels) in enumerate(draw):
        if index == warmup + steps:
            break
        inputs = {name: tensor.to(device, non_blocking=True) for name, tensor in inputs.items()}
        labels = labels.to(device)
        _synchronize(device)
        started = time.perf_counter()
        with autocast:
            logits = model(**inputs).float()
        logits = logits.reshape(len(labels), -1)  # (B,) before the ensemble, (B, k) now
        loss = weighted_loss(logits, labels, torch.ones_like(labels))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        _synchronize(device)
        if index >= warmup:
            timings.append(time.perf_counter() - started)
    return float(np.median(timings))


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()
