"""SwiGLU feed-forward (Shazeer 2020): (Swish(x·W₁) ⊙ x·W₂)·W₃, hidden width 8H/3."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from deepsummit.model.ensemble import linear


class SwiGLU(nn.Module):
    def __init__(self, hidden_size: int, ffn_hidden_size: int, members: int = 1) -> None:
        super().__init__()
        self.gate_proj = linear(hidden_size, ffn_hidden_size, members, bias=False)  # W₁
        self.value_proj = linear(hidden_size, ffn_hidden_size, members, bias=False)  # W₂
        self.output_proj = linear(ffn_hidden_size, hidden_size, members, bias=False)  # W₃

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (B, S, H) → gate, value: (B, S, ffn_hidden) → (B, S, H).
        # The block applies dropout after this, so there is none in here (no double dropout).
        return self.output_proj(F.silu(self.gate_proj(x)) * self.value_proj(x))
