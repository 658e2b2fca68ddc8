"""The batches a network trains on (deepsummit/train/trainer.py)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from deepsummit.contracts.arrays import FeatureArrays
from deepsummit.serve.inference import to_tensors, without_weather


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
        rows = torch.from_numpy(np.flatnonzero(without_weather(arrays.weather_missing) == kind))
        if len(rows):
            chunks += list(rows[torch.randperm(len(rows), generator=generator)].split(batch_size))
    for index in torch.randperm(len(chunks), generator=generator).tolist():
        rows = chunks[index]
        yield {name: tensor[rows] for name, tensor in inputs.items()}, labels[rows], weights[rows]
