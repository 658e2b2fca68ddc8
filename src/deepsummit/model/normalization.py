"""RMSNorm (Zhang & Sennrich 2019): x / RMS(x) · γ, with RMS(x) = sqrt(mean(x²) + ε)."""

from __future__ import annotations

import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))  # γ: (H,)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (B, S, H). Computed in float32 so bf16 autocast does not lose the mean of squares.
        x32 = x.float()
        rms = torch.sqrt(x32.pow(2).mean(dim=-1, keepdim=True) + self.eps)  # (B, S, 1)
        return (x32 / rms).to(x.dtype) * self.weight  # (B, S, H)
