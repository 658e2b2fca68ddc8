"""RMSNorm (Zhang & Sennrich 2019): x / RMS(x) · γ, with RMS(x) = sqrt(mean(x²) + ε)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))  # γ: (H,)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (B, S, H). Computed in float32 so bf16 autocast does not lose the mean of squares;
        # torch's fused kernel computes the formula above in one pass.
        normalised = F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps)
        return normalised.to(x.dtype) * self.weight  # (B, S, H)
