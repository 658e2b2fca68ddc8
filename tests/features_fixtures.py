"""Pytest fixtures of the features tests: warehouses holding the whole data bundle."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest
from features_tables import load_bundle


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
