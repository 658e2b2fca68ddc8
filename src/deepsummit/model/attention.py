"""Multi-head self-attention: softmax(Q·Kᵀ / √d_k + mask)·V per head, heads concatenated, then
W^O. The mask is −∞ on the keys of absent tokens (a weather token with no value at all), so no
query reads them; every query still reads CLS and the tabular tokens."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class MultiHeadAttention(nn.Module):
    def __init__(self, hidden_size: int, num_heads: int, dropout: float) -> None:
        super().__init__()
        self.num_heads = num_heads  # n_h
        self.head_dim = hidden_size // num_heads  # d_k
        self.dropout = dropout  # on the attention weights, as in the spec's reference code
        self.q_proj = nn.Linear(hidden_size, hidden_size, bias=False)  # W^Q
        self.k_proj = nn.Linear(hidden_size, hidden_size, bias=False)  # W^K
        self.v_proj = nn.Linear(hidden_size, hidden_size, bias=False)  # W^V
        self.out_proj = nn.Linear(hidden_size, hidden_size, bias=False)  # W^O

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        # (B, S, H) → (B, S, n_h, d_k) → (B, n_h, S, d_k)
        return x.view(batch, seq, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(
        self,
        x: torch.Tensor,
        present: torch.Tensor | None = None,
        return_attention: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x: (B, S, H), present: (B, S) bool, the keys that take part (None: all) → (output
        (B, S, H), weights (B, n_h, S, S) if asked else None)."""
        batch, seq, hidden = x.shape
        # (B, 1, 1, S): one row of keys, broadcast over heads and queries.
        keys = None if present is None else present[:, None, None, :]
        q = self._split_heads(self.q_proj(x))  # (B, n_h, S, d_k)
        k = self._split_heads(self.k_proj(x))
        v = self._split_heads(self.v_proj(x))
        dropout_p = self.dropout if self.training else 0.0

        weights = None
        if return_attention:
            # Explicit path, only for explanations: the fused kernel never materialises weights.
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)  # (B, n_h, S, S)
            if keys is not None:
                scores = scores.masked_fill(~keys, float("-inf"))
            weights = scores.softmax(dim=-1)  # each row sums to 1
            context = F.dropout(weights, dropout_p, self.training) @ v  # (B, n_h, S, d_k)
        else:
            context = F.scaled_dot_product_attention(q, k, v, attn_mask=keys, dropout_p=dropout_p)

        # (B, n_h, S, d_k) → (B, S, n_h, d_k) → (B, S, H)
        context = context.transpose(1, 2).reshape(batch, seq, hidden)
        return self.out_proj(context), weights
