"""Time2Vec (Kazemi et al. 2019) and the modality embeddings that tell token types apart."""

from __future__ import annotations

import math

import torch
from torch import nn

# Modality ids (spec 1.3): 0 CLS, 1 tabular, then one id per weather scale (2 = 7-day,
# 3 = 30-day, 4 = 90-day).
CLS_MODALITY = 0
TABULAR_MODALITY = 1
FIRST_WEATHER_MODALITY = 2


class Time2Vec(nn.Module):
    """t ↦ [ω₀t + φ₀, sin(ω₁t + φ₁), …, sin(ω_k t + φ_k)]: one linear and k periodic channels."""

    def __init__(self, num_features: int, period: float = 2 * math.pi) -> None:
        super().__init__()
        # ω ~ N(0, 1) × 2π/period: the spec's N(0, 1) when period = 2π; see ModelConfig.
        scale = 2 * math.pi / period
        self.linear_weight = nn.Parameter(torch.randn(1) * scale)  # ω₀
        self.linear_bias = nn.Parameter(torch.randn(1))  # φ₀
        self.periodic_weights = nn.Parameter(torch.randn(num_features - 1) * scale)  # ω₁…ω_k
        self.periodic_biases = nn.Parameter(torch.randn(num_features - 1))  # φ₁…φ_k

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        t = t.unsqueeze(-1)  # (B, S) → (B, S, 1)
        linear = self.linear_weight * t + self.linear_bias  # (B, S, 1)
        periodic = torch.sin(self.periodic_weights * t + self.periodic_biases)  # (B, S, k)
        return torch.cat([linear, periodic], dim=-1)  # (B, S, 1 + k)


def modality_ids(n_tabular_tokens: int, weather_scale_tokens: tuple[int, ...]) -> torch.Tensor:
    """The modality id of every position: [0, 1 × T_tab, 2 × 7, 3 × 10, 4 × 9] → (S,) int64."""
    weather_ids = range(FIRST_WEATHER_MODALITY, FIRST_WEATHER_MODALITY + len(weather_scale_tokens))
    ids = torch.tensor([CLS_MODALITY, TABULAR_MODALITY, *weather_ids])
    counts = torch.tensor([1, n_tabular_tokens, *weather_scale_tokens])
    return torch.repeat_interleave(ids, counts)


class ModalityEmbedding(nn.Module):
    """Embedding(5, H) indexed by each position's modality id; added to the token (no [SEP])."""

    def __init__(
        self, n_tabular_tokens: int, weather_scale_tokens: tuple[int, ...], hidden_size: int
    ):
        super().__init__()
        self.embedding = nn.Embedding(
            FIRST_WEATHER_MODALITY + len(weather_scale_tokens), hidden_size
        )
        # A buffer follows the module to the device; not persistent: it is derived from config.
        self.register_buffer(
            "ids", modality_ids(n_tabular_tokens, weather_scale_tokens), persistent=False
        )

    def forward(self) -> torch.Tensor:
        return self.embedding(self.ids)  # (S, H), broadcast over the batch by the caller
