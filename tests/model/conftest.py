"""Fixtures for the model tests: a small config and a random batch shaped like FeatureArrays."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from deepsummit.model.config import ModelConfig

Batch = dict[str, torch.Tensor]


@pytest.fixture
def small_config() -> ModelConfig:
    # Full token layout (47 tokens), tiny widths: fast on two shared CPU cores.
    return ModelConfig(
        hidden_size=16,
        num_layers=3,
        num_heads=2,
        categorical_cardinalities=(7, 5, 3, 5, 4, 6),
    )


def random_batch(config: ModelConfig, batch_size: int, seed: int = 0) -> Batch:
    """A batch of the model's keyword inputs (dtypes of docs/architecture.md), ~20% missing."""
    g = torch.Generator().manual_seed(seed)
    n_weather = config.n_weather_tokens
    categorical = torch.stack(
        [
            torch.randint(0, size, (batch_size,), generator=g)
            for size in config.categorical_cardinalities
        ],
        dim=1,
    )
    return {
        "numeric": torch.randn(batch_size, config.n_numeric, generator=g),
        "numeric_missing": torch.rand(batch_size, config.n_numeric, generator=g) < 0.2,
        "categorical": categorical,
        "binary": torch.randint(0, 2, (batch_size, config.n_binary), generator=g),
        "binary_missing": torch.rand(batch_size, config.n_binary, generator=g) < 0.2,
        "weather": torch.randn(batch_size, n_weather, config.n_weather_vars, generator=g),
        "weather_missing": torch.rand(batch_size, n_weather, config.n_weather_vars, generator=g)
        < 0.2,
        "days_before": torch.rand(batch_size, n_weather, generator=g) * 90,
        "day_of_year": torch.randint(1, 367, (batch_size, n_weather), generator=g).float(),
    }


@pytest.fixture
def make_batch() -> Callable[..., Batch]:
    return random_batch
