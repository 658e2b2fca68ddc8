"""Pytest fixtures of the features tests: warehouses holding the whole data bundle."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest
from features_tables import load_bundle, settings_for

from deepsummit.core.context import RunContext
from deepsummit.features.stage import build_features


@pytest.fixture(scope="session")
def bundle_warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A warehouse file with the whole bundle in the contract tables (copy it to change it)."""
    path = tmp_path_factory.mktemp("bundle") / "bundle.duckdb"
    con = duckdb.connect(str(path))
    load_bundle(con)
    con.close()
    return path


@pytest.fixture
def bundle_copy(bundle_warehouse: Path, tmp_path: Path) -> Path:
    path = tmp_path / "w.duckdb"
    shutil.copy(bundle_warehouse, path)
    return path


@pytest.fixture(scope="session")
def bundle_features(bundle_warehouse: Path, tmp_path_factory: pytest.TempPathFactory):
    """(settings, report, features table) of the features stage run on a copy of the bundle,
    with the configured extension inputs."""
    tmp = tmp_path_factory.mktemp("built")
    warehouse = tmp / "w.duckdb"
    shutil.copy(bundle_warehouse, warehouse)
    settings = settings_for(tmp, warehouse)
    report = build_features(settings, RunContext(tmp / "run"))
    with duckdb.connect(str(warehouse), read_only=True) as con:
        features = con.table("features").pl()
    return settings, report, features
