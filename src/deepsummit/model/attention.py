"""Multi-head self-attention: softmax(Q·Kᵀ / √d_k + mask)·V per head, heads concatenated, then
W^O. The mask is −∞ on the keys of absent tokens (a weather token with no value at all), so no
query reads them; every query still reads CLS and the tabular tokens.

With `cls_only` (the last block: the head reads nothing but CLS), only CLS queries. Its keys
and values are every token's, as always, so CLS's output is exactly what the full layer gives
it. With one query a head, the keys and values never need projecting: q·(x_j W_K,hᵀ) =
x_j·(W_K,hᵀ q) and Σ_j a_j (x_j W_V,hᵀ) = (Σ_j a_j x_j) W_V,hᵀ, so the block reads the tokens
themselves: S·H·n_h products a head's query instead of 2·S·H² for the projections (the same
numbers, in another order).

With k ensemble members (deepsummit/model/ensemble.py) each linear map carries every member's
adapters and the rows are the members' (B·k). In the block where the members' path starts
(`first_of_members`), W^Q, W^K and W^V read the B shared rows and give the B·k.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from deepsummit.model.ensemble import linear, row_adapters, tile_members


class MultiHeadAttention(nn.Module):
    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        dropout: float,
        cls_only: bool = False,
        members: int = 1,
        first_of_members: bool = False,
    ) -> None:
        super().__init__()
        self.num_heads = num_heads  # n_h
        self.head_dim = hidden_size // num_heads  # d_k
        self.dropout = dropout  # on the attention weights, as in the spec's reference code
        self.cls_only = cls_only
        # Rows out per row in: k where the members' path starts here, else 1.
        self.fan_out = members if first_of_members else 1
        first = first_of_members
        self.q_proj = linear(hidden_size, hidden_size, members, False, first)  # W^Q
        self.k_proj = linear(hidden_size, hidden_size, members, False, first)  # W^K
        self.v_proj = linear(hidden_size, hidden_size, members, False, first)  # W^V
        self.out_proj = linear(hidden_size, hidden_size, members, bias=False)  # W^O

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
        (B·f, Q, H), weights (B·f, n_h, Q, S) if asked else None), with Q = 1 for `cls_only`
        (else S) and f = k where the members' path starts here (else 1)."""
        if self.cls_only:
            return self._cls_attention(x, present, return_attention)
        if present is not None and self.fan_out > 1:
            present = tile_members(present, self.fan_out)
        # (B·f, 1, 1, S): one row of keys, broadcast over heads and queries.
        keys = None if present is None else present[:, None, None, :]
        q = self._split_heads(self.q_proj(x[:, :1] if self.cls_only else x))  # (B·f, n_h, Q, d_k)
        k = self._split_heads(self.k_proj(x))  # (B·f, n_h, S, d_k)
        v = self._split_heads(self.v_proj(x))
        dropout_p = self.dropout if self.training else 0.0

        weights = None
        if return_attention:
            # Explicit path, only for explanations: the fused kernel never materialises weights.
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)  # (B·f, n_h, Q, S)
            if keys is not None:
                scores = scores.masked_fill(~keys, float("-inf"))
            weights = scores.softmax(dim=-1)  # each row sums to 1
            context = F.dropout(weights, dropout_p, self.training) @ v  # (B·f, n_h, Q, d_k)
        else:
            context = F.scaled_dot_product_attention(q, k, v, attn_mask=keys, dropout_p=dropout_p)

        # (B·f, n_h, Q, d_k) → (B·f, Q, n_h, d_k) → (B·f, Q, H)
        context = context.transpose(1, 2).flatten(2)
        return self.out_proj(context), weights

    def _cls_attention(
        self, x: torch.Tensor, present: torch.Tensor | None, return_attention: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """CLS's query over every token, read in the tokens' own space (module docstring).
        x: (R, S, H) → ((R·f, 1, H), weights (R·f, n_h, 1, S) if asked)."""
        rows, _, hidden = x.shape
        queried = rows * self.fan_out  # R·f: one query row per member
        heads, dim = self.num_heads, self.head_dim
        q = self.q_proj(x[:, 0])  # (R·f, H)
        r_k, s_k = row_adapters(self.k_proj, queried)  # each row's member's adapters of W^K
        r_v, s_v = row_adapters(self.v_proj, queried)
        if s_k is not None:
            q = q * s_k  # q·(k ⊙ s) = (q ⊙ s)·k
        w_k = self.k_proj.weight.view(heads, dim, hidden)  # (n_h, d_k, H)
        w_v = self.v_proj.weight.view(heads, dim, hidden)
        u = torch.einsum("rhd,hdi->rhi", q.view(queried, heads, dim), w_k)  # (R·f, n_h, H)
        if r_k is not None:
            u = u * r_k[:, None, :]  # (x ⊙ r)·u = x·(u ⊙ r)
        # Every member's heads of one input row against that row's tokens: (R, f·n_h, S).
        scores = u.reshape(rows, self.fan_out * heads, hidden) @ x.transpose(1, 2)
        scores = scores / math.sqrt(dim)
        if present is not None:
            scores = scores.masked_fill(~present[:, None, :], float("-inf"))
        weights = scores.softmax(dim=-1)
        dropout_p = self.dropout if self.training else 0.0
        read = F.dropout(weights, dropout_p, self.training) @ x  # Σ_j a_j x_j: (R, f·n_h, H)
        read = read.reshape(queried, heads, hidden)
        if r_v is not None:
            read = read * r_v[:, None, :]
        context = torch.einsum("rhi,hdi->rhd", read, w_v).flatten(1)  # (R·f, H)
        if s_v is not None:
            context = context * s_v
        output = self.out_proj(context.unsqueeze(1))  # (R·f, 1, H)
        shaped = weights.reshape(queried, heads, 1, -1) if return_attention else None
        return output, shaped
