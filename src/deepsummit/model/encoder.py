"""Pre-norm transformer block and the encoder stack (L blocks + final RMSNorm).

x'  = x  + DropPath(Dropout(MHA(RMSNorm(x))))
x'' = x' + DropPath(Dropout(SwiGLU(RMSNorm(x'))))

The head reads only CLS, so the last block computes only CLS's output (its attention still
reads every key): the same logits as the full block for a fraction of its cost.

With k ensemble members (deepsummit/model/ensemble.py) the last `ensemble_layers` blocks run
once per member: the first of them reads the B shared rows and gives B·k, each member's through
its own adapters. The encoder returns CLS once per member: B·k rows.
"""

from __future__ import annotations

import torch
from torch import nn

from deepsummit.model.attention import MultiHeadAttention
from deepsummit.model.config import ModelConfig
from deepsummit.model.ensemble import split_members, tile_members
from deepsummit.model.ffn import SwiGLU
from deepsummit.model.normalization import RMSNorm
from deepsummit.model.regularization import DropPath, drop_path_schedule


class TransformerBlock(nn.Module):
    def __init__(
        self,
        config: ModelConfig,
        drop_path_prob: float,
        last: bool = False,
        members: int = 1,
        first_of_members: bool = False,
    ) -> None:
        """`last`: CLS's output only; `members`: the k whose adapters its maps carry (1: the
        maps are shared); `first_of_members`: it reads the B shared rows and gives B·k."""
        super().__init__()
        hidden = config.hidden_size
        self.last = last
        self.fan_out = members if first_of_members else 1
        self.norm1 = RMSNorm(hidden)
        attention_dropout = (
            config.dropout if config.attention_dropout is None else config.attention_dropout
        )
        self.attention = MultiHeadAttention(
            hidden, config.num_heads, attention_dropout, last, members, first_of_members
        )
        self.dropout1 = nn.Dropout(config.dropout)
        self.drop_path1 = DropPath(drop_path_prob)
        self.norm2 = RMSNorm(hidden)
        self.ffn = SwiGLU(hidden, config.ffn_hidden_size, members)
        self.dropout2 = nn.Dropout(config.dropout)
        self.drop_path2 = DropPath(drop_path_prob)

    def forward(
        self,
        x: torch.Tensor,
        present: torch.Tensor | None = None,
        return_attention: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        # x: (B, S, H), present: (B, S) bool → (B·f, S, H), or (B·f, 1, H) for the last block;
        # weights (B·f, n_h, S or 1, S) when asked.
        attended, weights = self.attention(self.norm1(x), present, return_attention)
        residual = tile_members(x[:, :1] if self.last else x, self.fan_out)
        x = residual + self.drop_path1(self.dropout1(attended))
        x = x + self.drop_path2(self.dropout2(self.ffn(self.norm2(x))))
        return x, weights


class TransformerEncoder(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        rates = drop_path_schedule(config.drop_path_rate, config.num_layers)
        self.members = config.ensemble_size  # k
        # The first block the members run through (num_layers: none, a single network).
        self.first_of_members = (
            config.num_layers - config.ensemble_layers if self.members > 1 else config.num_layers
        )
        self.blocks = nn.ModuleList(
            TransformerBlock(
                config,
                rate,
                last=index == config.num_layers - 1,
                members=self.members if index >= self.first_of_members else 1,
                first_of_members=index == self.first_of_members,
            )
            for index, rate in enumerate(rates)
        )
        self.norm = RMSNorm(config.hidden_size)

    def forward(
        self,
        x: torch.Tensor,
        present: torch.Tensor | None = None,
        return_attention: bool = False,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """x: (B, S, H), present: (B, S) bool, the tokens attention may read (None: all) →
        (CLS encoded once per member (B·k, 1, H), each layer's weights when asked, the members'
        mean: (B, n_h, S, S), the last layer's CLS row (B, n_h, 1, S))."""
        attention = []
        for index, block in enumerate(self.blocks):
            x, weights = block(x, present, return_attention)
            tiled = index >= self.first_of_members
            if tiled and present is not None and index == self.first_of_members:
                present = tile_members(present, self.members)  # the members' rows from here
            if weights is not None:
                attention.append(split_members(weights, self.members).mean(1) if tiled else weights)
        return self.norm(x), attention
