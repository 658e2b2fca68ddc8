"""Stochastic depth (Huang et al. 2016): DropPath and its linear schedule over layers."""

from __future__ import annotations

import torch
from torch import nn


def drop_path_schedule(rate: float, num_layers: int) -> list[float]:
    """p_i = rate × i / (L − 1): 0 for the first layer, `rate` for the last (0 when L = 1)."""
    if num_layers == 1:
        return [0.0]
    return [rate * i / (num_layers - 1) for i in range(num_layers)]


class DropPath(nn.Module):
    """Training: F(x) · m / (1 − p), m ~ Bernoulli(1 − p) per sample. Eval: identity."""

    def __init__(self, drop_prob: float = 0.0) -> None:
        super().__init__()
        self.drop_prob = drop_prob

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.drop_prob == 0.0:
            return x
        keep_prob = 1.0 - self.drop_prob
        # One draw per sample, broadcast over the sequence and hidden axes: (B, 1, 1).
        shape = (x.shape[0],) + (1,) * (x.ndim - 1)
        mask = torch.rand(shape, device=x.device) < keep_prob
        return x * mask.to(x.dtype) / keep_prob

    def extra_repr(self) -> str:
        return f"drop_prob={self.drop_prob:.3f}"
