"""Per-feature tokenizers (FT-Transformer style): T_tab tabular tokens and T_w weather tokens.

A missing value never looks like data: a missing numeric or binary feature becomes its own
learned "missing" token (the raw value is not used at all), and a missing weather value is
zeroed before the value projection while a learned projection of the missing mask says which
values were absent.

Every feature has its own parameters, computed for all features at once: the numeric maps as
one batched product, the categorical and binary embeddings as one table in which each feature
owns a slice (its offset).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from deepsummit.model.config import ModelConfig
from deepsummit.model.embeddings import Time2Vec


def quantile_bin_edges(
    values: torch.Tensor, missing: torch.Tensor, bins: int
) -> tuple[tuple[float, ...], ...]:
    """Per column of `values` (N, N_num), the distinct quantiles 0, 1/bins, …, 1 of its present
    values: the edges of its piecewise-linear bins (at least two, so at least one bin)."""
    edges = []
    levels = torch.linspace(0, 1, bins + 1, dtype=torch.float64)
    for column in range(values.shape[1]):
        present = values[~missing[:, column], column].double()
        cuts = torch.quantile(present, levels).unique().tolist() if len(present) else []
        edges.append(tuple(cuts) if len(cuts) > 1 else (-1.0, 1.0))
    return tuple(edges)


class PiecewiseLinearEncoding(nn.Module):
    """x_i ↦ e_i ∈ R^T over feature i's bin edges b_0 < … < b_T (Gorishniy et al. 2022):
    e_it = (x_i − b_{t−1}) / (b_t − b_{t−1}), clipped to [0, 1], except that the first bin is
    open below and the last open above, so values outside the training range still move the
    token. A feature with fewer bins than the widest has zeros in the rest."""

    def __init__(self, edges: tuple[tuple[float, ...], ...]) -> None:
        super().__init__()
        width = max(len(e) - 1 for e in edges)  # T
        left = torch.zeros(len(edges), width)
        span = torch.ones(len(edges), width)
        valid = torch.zeros(len(edges), width, dtype=torch.bool)
        first = torch.zeros(len(edges), width, dtype=torch.bool)
        first[:, 0] = True
        last = torch.zeros(len(edges), width, dtype=torch.bool)
        for i, feature_edges in enumerate(edges):
            cuts = torch.tensor(feature_edges)
            bins = len(cuts) - 1
            left[i, :bins] = cuts[:-1]
            span[i, :bins] = cuts[1:] - cuts[:-1]
            valid[i, :bins] = True
            last[i, bins - 1] = True
        # Derived from the config's edges, so not saved with the weights.
        self.register_buffer("left", left, persistent=False)  # (N_num, T)
        self.register_buffer("span", span, persistent=False)
        self.register_buffer("valid", valid, persistent=False)
        self.register_buffer("first", first, persistent=False)
        self.register_buffer("last", last, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = (x.unsqueeze(-1) - self.left) / self.span  # (B, N_num, T)
        e = torch.where(self.first, e, e.clamp(min=0.0))  # the first bin is open below
        e = torch.where(self.last, e, e.clamp(max=1.0))  # the last is open above
        return e * self.valid


class TabularTokenizer(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        hidden, n_numeric = config.hidden_size, config.n_numeric
        # token_i = x_i · w_i + b_i (the spec's Linear_i(1, H)), or with piecewise-linear
        # embeddings token_i = PLE(x_i) · W_i + b_i, W_i: (T, H).
        self.piecewise = (
            PiecewiseLinearEncoding(config.numeric_bin_edges)
            if config.numeric_embedding == "piecewise"
            else None
        )
        inputs = 1 if self.piecewise is None else self.piecewise.left.shape[1]  # 1 or T
        bound = 1 / math.sqrt(inputs)  # nn.Linear's initialisation
        self.numeric_weight = nn.Parameter(
            torch.empty(n_numeric, inputs, hidden).uniform_(-bound, bound)
        )  # (N_num, 1 or T, H)
        self.numeric_bias = nn.Parameter(torch.empty(n_numeric, hidden).uniform_(-bound, bound))
        self.numeric_missing = nn.Parameter(torch.randn(n_numeric, hidden))  # (N_num, H)
        # token_i = Embedding_i[value]: categorical index 0 = unknown / rare; binary 0 or 1.
        sizes = (*config.categorical_cardinalities, *(2,) * config.n_binary)
        self.embedding = nn.Embedding(sum(sizes), hidden)
        offsets = torch.tensor([0, *sizes[:-1]]).cumsum(0) if sizes else torch.zeros(0)
        self.register_buffer("offsets", offsets.long(), persistent=False)  # (N_cat + N_bin,)
        self.binary_missing = nn.Parameter(torch.randn(config.n_binary, hidden))  # (N_bin, H)

    def forward(
        self,
        numeric: torch.Tensor,  # (B, N_num) float32, z-scored
        numeric_missing: torch.Tensor,  # (B, N_num) bool
        categorical: torch.Tensor,  # (B, N_cat) int64
        binary: torch.Tensor,  # (B, N_bin) int64
        binary_missing: torch.Tensor,  # (B, N_bin) bool
    ) -> torch.Tensor:
        encoded = numeric.unsqueeze(-1) if self.piecewise is None else self.piecewise(numeric)
        numeric_tokens = (
            torch.einsum("bni,nih->bnh", encoded, self.numeric_weight) + self.numeric_bias
        )  # (B, N_num, H)
        # `where`, not a blend: at a missing position neither the value nor its gradient passes.
        numeric_tokens = torch.where(
            numeric_missing.unsqueeze(-1), self.numeric_missing, numeric_tokens
        )
        indexed = self.embedding(torch.cat([categorical, binary], dim=1) + self.offsets)
        n_categorical = categorical.shape[1]
        categorical_tokens = indexed[:, :n_categorical]  # (B, N_cat, H)
        binary_tokens = torch.where(
            binary_missing.unsqueeze(-1), self.binary_missing, indexed[:, n_categorical:]
        )  # (B, N_bin, H)
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
