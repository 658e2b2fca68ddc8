"""Pre-norm transformer block and the encoder stack (L blocks + final RMSNorm).

x'  = x  + DropPath(Dropout(MHA(RMSNorm(x))))
x'' = x' + DropPath(Dropout(SwiGLU(RMSNorm(x'))))
"""

from __future__ import annotations

import torch
from torch import nn

from deepsummit.model.attention import MultiHeadAttention
from deepsummit.model.config import ModelConfig
from deepsummit.model.ffn import SwiGLU
from deepsummit.model.normalization import RMSNorm
from deepsummit.model.regularization import DropPath, drop_path_schedule


class TransformerBlock(nn.Module):
    def __init__(self, config: ModelConfig, drop_path_prob: float) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.norm1 = RMSNorm(hidden)
        attention_dropout = (
            config.dropout if config.attention_dropout is None else config.attention_dropout
        )
        self.attention = MultiHeadAttention(hidden, config.num_heads, attention_dropout)
        self.dropout1 = nn.Dropout(config.dropout)
        self.drop_path1 = DropPath(drop_path_prob)
        self.norm2 = RMSNorm(hidden)
        self.ffn = SwiGLU(hidden, config.ffn_hidden_size)
        self.dropout2 = nn.Dropout(config.dropout)
        self.drop_path2 = DropPath(drop_path_prob)

    def forward(
        self,
        x: torch.Tensor,
        present: torch.Tensor | None = None,
        return_attention: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        # x: (B, S, H), present: (B, S) bool → (B, S, H); weights (B, n_h, S, S) when asked.
        attended, weights = self.attention(self.norm1(x), present, return_attention)
        x = x + self.drop_path1(self.dropout1(attended))
        x = x + self.drop_path2(self.dropout2(self.ffn(self.norm2(x))))
        return x, weights


class TransformerEncoder(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            TransformerBlock(config, p)
            for p in drop_path_schedule(config.drop_path_rate, config.num_layers)
        )
        self.norm = RMSNorm(config.hidden_size)

    def forward(
        self,
        x: torch.Tensor,
        present: torch.Tensor | None = None,
        return_attention: bool = False,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """x: (B, S, H), present: (B, S) bool, the tokens attention may read (None: all) →
        (encoded (B, S, H), per-layer weights, empty unless asked)."""
        attention = []
        for block in self.blocks:
            x, weights = block(x, present, return_attention)
            if weights is not None:
                attention.append(weights)
        return self.norm(x), attention
