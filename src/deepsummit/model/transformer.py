"""DeepSummitTransformer: [CLS] + T_tab tabular + T_w weather tokens (+ modality) → encoder →
one logit per ensemble member (shape symbols: deepsummit/model/config.py).

A weather token with no value at all (a day without data; every token of an attempt whose peak
has no weather) is absent: attention reads no key of it, so an attempt without weather is
answered from its tabular tokens alone, in training and in serving alike. A batch in which no
row has any weather is therefore encoded without the weather positions at all: the same logits
for half the work (the trainer groups such rows into their own batches)."""

from __future__ import annotations

import torch
from torch import nn

from deepsummit.model.config import ModelConfig
from deepsummit.model.embeddings import ModalityEmbedding
from deepsummit.model.encoder import TransformerEncoder
from deepsummit.model.head import ClassificationHead
from deepsummit.model.tokenizer import TabularTokenizer, WeatherTokenizer


class DeepSummitTransformer(nn.Module):
    def __init__(self, config: ModelConfig | None = None) -> None:
        super().__init__()
        self.config = config = config or ModelConfig()
        self.cls_token = nn.Parameter(torch.randn(1, 1, config.hidden_size) * 0.02)  # (1, 1, H)
        self.tabular_tokenizer = TabularTokenizer(config)
        self.weather_tokenizer = WeatherTokenizer(config)
        self.modality = ModalityEmbedding(
            config.n_tabular_tokens, config.weather_scale_tokens, config.hidden_size
        )
        self.encoder = TransformerEncoder(config)
        self.head = ClassificationHead(config.hidden_size, config.dropout, config.ensemble_size)

    def forward(
        self,
        numeric: torch.Tensor,  # (B, N_num) float32
        numeric_missing: torch.Tensor,  # (B, N_num) bool
        categorical: torch.Tensor,  # (B, N_cat) int64
        binary: torch.Tensor,  # (B, N_bin) int64
        binary_missing: torch.Tensor,  # (B, N_bin) bool
        weather: torch.Tensor,  # (B, T_w, V) float32
        weather_missing: torch.Tensor,  # (B, T_w, V) bool
        days_before: torch.Tensor,  # (B, T_w) float32
        day_of_year: torch.Tensor,  # (B, T_w) float32
        return_attention: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, list[torch.Tensor]]:
        """The members' logits (B, k); with `return_attention`, also each layer's weights
        (B, n_h, S, S)."""
        tabular = self.tabular_tokenizer(
            numeric, numeric_missing, categorical, binary, binary_missing
        )  # (B, T_tab, H)
        cls = self.cls_token.expand(tabular.shape[0], -1, -1)  # (B, 1, H)
        weather_present = ~weather_missing.all(dim=-1)  # (B, T_w)
        if weather_present.any() or return_attention:
            weather_tokens = self.weather_tokenizer(
                weather, weather_missing, days_before, day_of_year
            )  # (B, T_w, H)
            tokens = torch.cat([cls, tabular, weather_tokens], dim=1)  # (B, S, H)
        else:
            tokens = torch.cat([cls, tabular], dim=1)  # (B, 1 + T_tab, H): nothing to mask
            weather_present = weather_present[:, :0]
        sequence = tokens + self.modality()[: tokens.shape[1]]
        present = torch.cat(
            [
                torch.ones(cls.shape[0], 1 + tabular.shape[1], dtype=torch.bool, device=cls.device),
                weather_present,
            ],
            dim=1,
        )  # (B, S)
        encoded, attention = self.encoder(sequence, present, return_attention)  # (B·k, 1, H)
        logits = self.head(encoded).view(-1, self.config.ensemble_size)  # (B, k)
        return (logits, attention) if return_attention else logits
