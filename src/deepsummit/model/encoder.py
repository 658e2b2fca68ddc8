"""Pre-norm transformer block and the encoder stack (L blocks + final RMSNorm).

x'  = x  + DropPath(Dropout(MHA(RMSNorm(x))))
x'' = x' + DropPath(Dropout(SwiGLU(RMSNorm(x'))))

The head reads only CLS, so the last block computes only CLS's output (its attention still
reads every key): the same logits as the full block for a fraction of its cost.

With k ensemble members (deepsummit/model/ensemble.py) the sequence is tiled to B·k rows before
the first of the last `ensemble_layers` blocks, which run once per member; with none of them,
the members' path starts at CLS's query in the last block. Either way the encoder returns CLS
once per member: B·k rows.
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
        tiled: bool = False,
        first_tiled: bool = False,
    ) -> None:
        """`last`: CLS's output only; `tiled`: the rows are the members' (B·k), the first such
        block `first_tiled`."""
        super().__init__()
        hidden = config.hidden_size
        members = config.ensemble_size if tiled or last else 1  # k, or 1: shared maps
        self.tile_cls = last and members > 1 and not tiled  # the members' path starts at CLS
        self.members = members
        self.last = last
        self.norm1 = RMSNorm(hidden)
        attention_dropout = (
            config.dropout if config.attention_dropout is None else config.attention_dropout
        )
        self.attention = MultiHeadAttention(
            hidden,
            config.num_heads,
            attention_dropout,
            cls_only=last,
            members=members,
            tile_queries=self.tile_cls,
            first_of_members=first_tiled,
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
        # x: (B, S, H), present: (B, S) bool → (B, S, H), or (B·k, 1, H) for the last block;
        # weights (B, n_h, S, S), or (B, n_h, 1, S), when asked.
        attended, weights = self.attention(self.norm1(x), present, return_attention)
        residual = x[:, :1] if self.last else x
        if self.tile_cls:
            residual = tile_members(residual, self.members)
        x = residual + self.drop_path1(self.dropout1(attended))
        x = x + self.drop_path2(self.dropout2(self.ffn(self.norm2(x))))
        return x, weights


class TransformerEncoder(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        rates = drop_path_schedule(config.drop_path_rate, config.num_layers)
        self.members = config.ensemble_size  # k
        # The first block the members run through whole (num_layers: none).
        self.first_tiled = (
            config.num_layers - config.ensemble_layers
            if self.members > 1 and config.ensemble_layers
            else config.num_layers
        )
        self.blocks = nn.ModuleList(
            TransformerBlock(
                config,
                rate,
                last=index == config.num_layers - 1,
                tiled=index >= self.first_tiled,
                first_tiled=index == self.first_tiled,
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
        (CLS encoded once per member (B·k, 1, H), each layer's weights when asked: (B, n_h, S, S),
        the last layer's CLS row (B, n_h, 1, S))."""
        attention = []
        for index, block in enumerate(self.blocks):
            if index == self.first_tiled:
                x = tile_members(x, self.members)  # (B·k, S, H)
                present = None if present is None else tile_members(present, self.members)
            x, weights = block(x, present, return_attention)
            if weights is not None:
                tiled = index >= self.first_tiled
                attention.append(split_members(weights, self.members).mean(1) if tiled else weights)
        return self.norm(x), attention
