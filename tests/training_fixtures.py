"""The trained registry of the training, evaluation, serving and registry tests.

`trained_registry`: the real train stage on the real features snapshot of the bundle (tiny
profile: a slice of the training rows), registered in a temporary MLflow store. Trained once per
test session (by the first worker that asks) and shared by every module that lists this file in
`pytest_plugins` (imported into a module instead, a session fixture is that module's own and
trains again, about 16 s each). The tests only read it: what they register, gate or copy goes
into stores of their own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient
from session_shared import made_once

from deepsummit.core.config import Settings, load_settings
from deepsummit.core.context import RunContext
from deepsummit.train.report import TrainReport
from deepsummit.train.stage import train_and_register


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
    serving a blend, with the features settings of `features` when given."""
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
        # The registry's versions serve the blend of the transformer and the best tree: every
        # path that loads a version (pyfunc, scorer, outlook, model server) reads its tree too.
        "baselines": {"served": "blend"},
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


@pytest.fixture(scope="session")
def trained_registry(bundle_features) -> TrainedRegistry:
    """Trained once per test session, by the first worker that asks (tests/session_shared.py):
    13 s of training the other worker does not repeat."""
    features_settings, features_report, _ = bundle_features

    def train(root: Path) -> TrainedRegistry:
        settings = registry_settings(root, features_settings)
        run = RunContext(root / "run", tags={"prefect.flow_run_id": "flow-run-123"})
        report = train_and_register(settings, run, features_snapshot=features_report.directory)
        return TrainedRegistry(root, settings, features_report.directory, report)

    return made_once("trained-registry", train)
