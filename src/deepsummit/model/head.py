"""Classification head on the [CLS] token: Linear(H, H) → GELU → Dropout → Linear(H, 1).

It returns the logit; the spec's final sigmoid is applied by the loss (BCEWithLogitsLoss) and at
prediction time, which is the same function, numerically stable. With k ensemble members its
two linear maps carry each member's adapters (deepsummit/model/ensemble.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from deepsummit.model.ensemble import linear


class ClassificationHead(nn.Module):
    def __init__(self, hidden_size: int, dropout: float, members: int = 1) -> None:
        super().__init__()
        self.dense = linear(hidden_size, hidden_size, members)
        self.dropout = nn.Dropout(dropout)
        self.classifier = linear(hidden_size, 1, members)

    def forward(self, encoded: torch.Tensor) -> torch.Tensor:
        cls_token = encoded[:, 0, :]  # (B, S, H) → (B, H)
        hidden = self.dropout(F.gelu(self.dense(cls_token)))  # (B, H)
        return self.classifier(hidden).squeeze(-1)  # (B, 1) → (B,) logits
