"""Model inputs for the training, evaluation and registry tests.

`synthetic_arrays`: arrays with a learnable signal, for the trainer and the baselines alone (the
label depends on one numeric feature, one category and the attempt day's first weather channel,
so a model that learns anything scores well above AUC 0.5, a broken one exactly 0.5).

`trained_registry`: the real train stage on the real features snapshot of the bundle (tiny
profile: a slice of the training rows), registered in a temporary MLflow store.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from mlflow import MlflowClient

from deepsummit.contracts.arrays import FeatureArrays
from deepsummit.core.config import Settings, load_settings
from deepsummit.core.context import RunContext
from deepsummit.core.inputs import SPEC_INPUT_SET, WEATHER_CHANNELS, WEATHER_TOKENS
from deepsummit.train.stage import TrainReport, train_and_register

CARDINALITIES: tuple[int, ...] = (6, 5, 4, 5, 3, 4)
# What the spec's 20 tokens and these vocabularies fix of the model (Preprocessor.model_dimensions).
DIMENSIONS: dict[str, Any] = {
    "n_numeric": len(SPEC_INPUT_SET.numeric),
    "n_binary": len(SPEC_INPUT_SET.binary),
    "categorical_cardinalities": CARDINALITIES,
    "n_weather_vars": len(WEATHER_CHANNELS),
}


def synthetic_arrays(n: int, seed: int) -> FeatureArrays:
    rng = np.random.default_rng(seed)
    numeric = rng.normal(size=(n, len(SPEC_INPUT_SET.numeric))).astype(np.float32)
    numeric_missing = rng.random(numeric.shape) < 0.1
    numeric[numeric_missing] = 0.0
    categorical = np.stack([rng.integers(0, size, n) for size in CARDINALITIES], axis=1)
    binary = rng.integers(0, 2, (n, len(SPEC_INPUT_SET.binary)))
    binary_missing = rng.random(binary.shape) < 0.05
    binary[binary_missing] = 0
    weather = rng.normal(size=(n, WEATHER_TOKENS, len(WEATHER_CHANNELS))).astype(np.float32)
    weather_missing = np.zeros_like(weather, dtype=bool)
    days_before = np.tile(np.arange(WEATHER_TOKENS, dtype=np.float32)[::-1], (n, 1))
    day_of_year = np.tile(rng.integers(1, 366, (n, 1)), (1, WEATHER_TOKENS)).astype(np.float32)
    signal = 3.0 * numeric[:, 0] + 2.0 * (categorical[:, 0] == 1) - 2.0 * weather[:, 6, 0]
    label = (rng.random(n) < 1 / (1 + np.exp(-signal))).astype(np.float32)
    return FeatureArrays(
        numeric=numeric,
        numeric_missing=numeric_missing,
        categorical=categorical.astype(np.int64),
        binary=binary.astype(np.int64),
        binary_missing=binary_missing,
        weather=weather,
        weather_missing=weather_missing,
        days_before=days_before,
        day_of_year=day_of_year,
        label=label,
    )


@dataclass(frozen=True)
class TrainedRegistry:
    """A temporary MLflow store (SQLite + artifact folder) holding one trained champion."""

    root: Path
    settings: Settings
    snapshot: Path  # the features snapshot it was trained on
    report: TrainReport

    @property
    def model_dir(self) -> Path:
        return self.root / "run" / "model"


def registry_settings(root: Path, features: Settings | None = None) -> Settings:
    """Tiny-profile settings tracking into `root` (the experiment's artifacts go there too),
    with the features settings of `features` when given."""
    overrides: dict[str, Any] = {
        "mlflow": {
            "tracking_uri": f"sqlite:///{root}/mlflow.db",
            "model_cache_dir": str(root / "model-cache"),
        },
        "train": {
            "checkpoint_dir": str(root / "checkpoints"),
            "learning_rate": 1e-2,
            "max_epochs": 3,
            "num_threads": 1,
        },
    }
    if features is not None:
        overrides["features"] = features.features.model_dump(mode="json")
    settings = load_settings("tiny", overrides=overrides)
    client = MlflowClient(settings.mlflow.tracking_uri)
    if client.get_experiment_by_name(settings.mlflow.experiment) is None:
        client.create_experiment(
            settings.mlflow.experiment, artifact_location=(root / "artifacts").as_uri()
        )
    return settings


@pytest.fixture(scope="session", name="trained_registry")
def trained_registry_fixture(
    tmp_path_factory: pytest.TempPathFactory, bundle_features
) -> TrainedRegistry:
    features_settings, features_report, _ = bundle_features
    root = tmp_path_factory.mktemp("registry")
    settings = registry_settings(root, features_settings)
    run = RunContext(root / "run", tags={"prefect.flow_run_id": "flow-run-123"})
    report = train_and_register(settings, run, features_snapshot=features_report.directory)
    return TrainedRegistry(root, settings, features_report.directory, report)
