"""The data bundle loaded as a run loads it, for benches: the records and weather stages called
as plain functions on a warehouse of their own (no services; MLflow is a file store there)."""

from __future__ import annotations

from pathlib import Path

from deepsummit.core.config import Settings, load_settings
from deepsummit.core.context import RunContext
from deepsummit.features.build import FeaturesReport, build_features
from deepsummit.records.ingest import ingest_records
from deepsummit.weather import load_weather


def bundle_settings(directory: Path, profile: str = "cpu") -> Settings:
    """Settings that keep every file under `directory`."""
    directory = directory.resolve()
    return load_settings(
        profile,
        {
            "paths": {
                "warehouse": str(directory / "warehouse.duckdb"),
                "var_dir": str(directory),
                "runs_dir": str(directory / "runs"),
            },
            "features": {"features_dir": str(directory / "features")},
            "train": {"checkpoint_dir": str(directory / "checkpoints")},
            "mlflow": {"tracking_uri": f"sqlite:///{directory / 'mlflow.db'}"},
        },
    )


def bundle_warehouse(directory: Path, profile: str = "cpu") -> Settings:
    """A new warehouse under `directory` holding the bundle's clean tables and weather."""
    settings = bundle_settings(directory, profile)
    settings.paths.warehouse.unlink(missing_ok=True)
    context = RunContext(settings.paths.runs_dir / "bundle")
    ingest_records(settings, context)
    load_weather(settings, context)
    return settings


def bundle_features(directory: Path, profile: str = "cpu") -> tuple[Settings, FeaturesReport]:
    """The bundle's features snapshot for `profile`, built under `directory`."""
    settings = bundle_warehouse(directory, profile)
    return settings, build_features(settings, RunContext(settings.paths.runs_dir / "features"))
