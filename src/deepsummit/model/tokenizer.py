"""Per-feature tokenizers (FT-Transformer style): T_tab tabular tokens and T_w weather tokens.

A missing value never looks like data: a missing numeric or binary feature becomes its own
learned "missing" token (the raw value is not used at all), and a missing weather value is
zeroed before the value projection while a learned projection of the missing mask says which
values were absent.
"""

from __future__ import annotations

import torch
from torch import nn

from deepsummit.model.config import ModelConfig
from deepsummit.model.embeddings import Time2Vec


class TabularTokenizer(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        hidden = config.hidden_size
        # token_i = Linear_i(x_i): one Linear(1, H) per numeric feature.
        self.numeric = nn.ModuleList(nn.Linear(1, hidden) for _ in range(config.n_numeric))
        self.numeric_missing = nn.Parameter(torch.randn(config.n_numeric, hidden))  # (N_num, H)
        # token_i = Embedding_i[category], index 0 = unknown / rare.
        self.categorical = nn.ModuleList(
            nn.Embedding(size, hidden) for size in config.categorical_cardinalities
        )
        # token_i = Embedding_i[0 or 1]: one Embedding(2, H) per binary feature.
        self.binary = nn.ModuleList(nn.Embedding(2, hidden) for _ in range(config.n_binary))
        self.binary_missing = nn.Parameter(torch.randn(config.n_binary, hidden))  # (N_bin, H)

    def forward(
        self,
        numeric: torch.Tensor,  # (B, N_num) float32, z-scored
        numeric_missing: torch.Tensor,  # (B, N_num) bool
        categorical: torch.Tensor,  # (B, N_cat) int64
        binary: torch.Tensor,  # (B, N_bin) int64
        binary_missing: torch.Tensor,  # (B, N_bin) bool
    ) -> torch.Tensor:
        numeric_tokens = torch.stack(
            [linear(numeric[:, i : i + 1]) for i, linear in enumerate(self.numeric)], dim=1
        )  # (B, N_num, H)
        # `where`, not a blend: at a missing position neither the value nor its gradient passes.
        numeric_tokens = torch.where(
            numeric_missing.unsqueeze(-1), self.numeric_missing, numeric_tokens
        )
        categorical_tokens = torch.stack(
            [embed(categorical[:, i]) for i, embed in enumerate(self.categorical)], dim=1
        )  # (B, N_cat, H)
        binary_tokens = torch.stack(
            [embed(binary[:, i]) for i, embed in enumerate(self.binary)], dim=1
        )  # (B, N_bin, H)
        binary_tokens = torch.where(
            binary_missing.unsqueeze(-1), self.binary_missing, binary_tokens
        )
        tokens = [numeric_tokens, categorical_tokens, binary_tokens]
        return torch.cat(tokens, dim=1)  # (B, T_tab, H)


class WeatherTokenizer(nn.Module):
    """token_t = W·weather_t + M·missing_t + P·(Time2Vec(days_before_t) ‖ Time2Vec(day_of_year_t)).

    W = Linear(V, H) over the values (zeros where missing), M = Linear(V, H, no bias) over the
    missing mask, P = Linear(2 · time2vec_dim, H) over the two Time2Vec encodings.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        hidden, n_vars, t2v = config.hidden_size, config.n_weather_vars, config.time2vec_dim
        self.weather_proj = nn.Linear(n_vars, hidden)  # shared across the T_w time steps
        self.missing_proj = nn.Linear(n_vars, hidden, bias=False)  # over the 0/1 missing mask
        self.time2vec_days_before = Time2Vec(t2v, period=config.days_before_period)
        self.time2vec_day_of_year = Time2Vec(t2v, period=config.day_of_year_period)
        self.temporal_proj = nn.Linear(2 * t2v, hidden)  # 2 · time2vec_dim → H

    def forward(
        self,
        weather: torch.Tensor,  # (B, T_w, V) float32, z-scored
        weather_missing: torch.Tensor,  # (B, T_w, V) bool
        days_before: torch.Tensor,  # (B, T_w) float32
        day_of_year: torch.Tensor,  # (B, T_w) float32
    ) -> torch.Tensor:
        # Zero the missing values here too, so whatever the caller put there cannot leak in.
        values = self.weather_proj(weather.masked_fill(weather_missing, 0.0))  # (B, T_w, H)
        missing = self.missing_proj(weather_missing.to(values.dtype))  # (B, T_w, H)
        temporal = torch.cat(
            [self.time2vec_days_before(days_before), self.time2vec_day_of_year(day_of_year)],
            dim=-1,
        )  # (B, T_w, 2 · time2vec_dim)
        return values + missing + self.temporal_proj(temporal)  # (B, T_w, H)
