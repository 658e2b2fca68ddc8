"""Parameter counts per component, to compare with the spec's estimate (~4.9M for the base)."""

from __future__ import annotations

from torch import nn

from deepsummit.model.transformer import DeepSummitTransformer


def count_parameters(module: nn.Module) -> int:
    return sum(parameter.numel() for parameter in module.parameters())


def parameter_breakdown(model: DeepSummitTransformer) -> dict[str, int]:
    """{component: parameters}, in forward order, ending with "total"."""
    breakdown = {
        "tabular_tokenizer": count_parameters(model.tabular_tokenizer),
        "weather_tokenizer": count_parameters(model.weather_tokenizer),
        "cls_token": model.cls_token.numel(),
        "modality_embedding": count_parameters(model.modality),
    }
    for index, block in enumerate(model.encoder.blocks):
        breakdown[f"encoder.block_{index}"] = count_parameters(block)
    breakdown["encoder.final_norm"] = count_parameters(model.encoder.norm)
    breakdown["head"] = count_parameters(model.head)
    breakdown["total"] = count_parameters(model)
    return breakdown
