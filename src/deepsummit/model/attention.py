"""Multi-head self-attention: softmax(Q·Kᵀ / √d_k + mask)·V per head, heads concatenated, then
W^O. The mask is −∞ on the keys of absent tokens (a weather token with no value at all), so no
query reads them; every query still reads CLS and the tabular tokens.

With `cls_only` (the last block: the head reads nothing but CLS), only CLS queries. Its keys
and values are every token's, as always, so CLS's output is exactly what the full layer gives
it.

With k ensemble members (deepsummit/model/ensemble.py) each linear map carries every member's
adapters, and the rows are the members' (B·k). Where the members' path starts at CLS in this
block (`tile_queries`: the rows are still B, shared by every member), CLS queries once per
member through W^Q and W^O, and the keys and values stay the shared ones.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from deepsummit.model.ensemble import linear, tile_members


class MultiHeadAttention(nn.Module):
    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        dropout: float,
        cls_only: bool = False,
        members: int = 1,
        tile_queries: bool = False,
        first_of_members: bool = False,
    ) -> None:
        """`members`: the k whose adapters the maps carry (1: shared maps); `tile_queries`: the
        members' path starts at this block's CLS query (requires `cls_only`);
        `first_of_members`: the members' path starts at this block's input, its maps are the
        first of the path (random-sign adapters)."""
        super().__init__()
        if tile_queries and not cls_only:
            raise ValueError("a members' path that starts inside a block starts at CLS")
        self.num_heads = num_heads  # n_h
        self.head_dim = hidden_size // num_heads  # d_k
        self.dropout = dropout  # on the attention weights, as in the spec's reference code
        self.cls_only = cls_only
        self.query_members = members if tile_queries else 1  # CLS queries per row
        key_members = 1 if tile_queries else members
        first = first_of_members or tile_queries
        self.q_proj = linear(hidden_size, hidden_size, members, False, first)  # W^Q
        self.k_proj = linear(hidden_size, hidden_size, key_members, False, first_of_members)  # W^K
        self.v_proj = linear(hidden_size, hidden_size, key_members, False, first_of_members)  # W^V
        self.out_proj = linear(hidden_size, hidden_size, members, bias=False)  # W^O

    def _split_heads(self, x: torch.Tensor, batch: int) -> torch.Tensor:
        # (B, Q, H) or (B·k, 1, H) → (B, Q or k, n_h, d_k) → (B, n_h, Q or k, d_k)
        return x.reshape(batch, -1, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(
        self,
        x: torch.Tensor,
        present: torch.Tensor | None = None,
        return_attention: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x: (B, S, H), present: (B, S) bool, the keys that take part (None: all) → (output
        (B, S, H), or (B·k, 1, H) with `cls_only`; weights (B, n_h, S, S), or (B, n_h, 1, S)
        averaged over the members, if asked, else None)."""
        batch = x.shape[0]
        # (B, 1, 1, S): one row of keys, broadcast over heads and queries.
        keys = None if present is None else present[:, None, None, :]
        queries = tile_members(x[:, :1], self.query_members) if self.cls_only else x
        q = self._split_heads(self.q_proj(queries), batch)  # (B, n_h, Q, d_k)
        k = self._split_heads(self.k_proj(x), batch)  # (B, n_h, S, d_k)
        v = self._split_heads(self.v_proj(x), batch)
        dropout_p = self.dropout if self.training else 0.0

        weights = None
        if return_attention:
            # Explicit path, only for explanations: the fused kernel never materialises weights.
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)  # (B, n_h, Q, S)
            if keys is not None:
                scores = scores.masked_fill(~keys, float("-inf"))
            weights = scores.softmax(dim=-1)  # each row sums to 1
            context = F.dropout(weights, dropout_p, self.training) @ v  # (B, n_h, Q, d_k)
            if self.cls_only:  # one CLS row per member: their mean (B, n_h, 1, S)
                weights = weights.mean(dim=2, keepdim=True)
        else:
            context = F.scaled_dot_product_attention(q, k, v, attn_mask=keys, dropout_p=dropout_p)

        # (B, n_h, Q, d_k) → (B, Q, n_h, d_k) → the queries' shape, (B, S, H) or (B·k, 1, H)
        context = context.transpose(1, 2).reshape(queries.shape)
        return self.out_proj(context), weights
