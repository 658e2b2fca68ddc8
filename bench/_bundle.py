"""The data bundle loaded as a run loads it, for benches: the records and weather stages called
as plain functions on a warehouse of their own (no services; MLflow is a file store there)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from deepsummit.core.config import Settings, deep_merge, load_settings
from deepsummit.core.context import RunContext
from deepsummit.features.stage import FeaturesReport, build_features
from deepsummit.records.stage import ingest_records
from deepsummit.weather import load_weather

# Where the benches that build the whole bundle keep it (and their cached folds) between runs.
DEFAULT_BUNDLE = Path(tempfile.gettempdir()) / "deepsummit-bundle"


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


def backtest_settings(
    directory: Path,
    profile: str = "cpu",
    backtest: dict[str, Any] | None = None,
    overrides: dict[str, Any] | None = None,
) -> Settings:
    """`profile` (plus nested `overrides`) for a backtest of the snapshot under `directory`,
    built first when missing: the bundle's paths and features, folds cached under
    `<directory>/backtest` (each under a key of the settings that train, so candidates never
    share a fold)."""
    base = bundle_settings(directory, profile)
    if not (directory / "features").exists():
        bundle_features(directory, profile)
    paths = base.model_dump(mode="json", include={"paths", "features", "mlflow"})
    paths["backtest"] = {"output_dir": str(directory / "backtest"), **(backtest or {})}
    paths["train"] = {"checkpoint_dir": str(directory / "checkpoints")}
    return load_settings(profile, deep_merge(paths, overrides or {}))
