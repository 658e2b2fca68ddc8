"""A small slice of the data bundle and settings that keep a run inside one temporary folder.

Used by the flow tests and the end-to-end test: two peaks (ANN1, KANG: about 3,000 member rows
spread over every split) so the whole chain runs in about a minute on the tiny profile.
"""

from __future__ import annotations

import functools
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import polars as pl
import prefect.testing.utilities
from session_shared import made_once

from deepsummit.core.config import load_settings
from deepsummit.services.local import prefect_home

SLICE_PEAKS = ("ANN1", "KANG")
# A hyperparameter search space whose trials train in seconds (tune.search_space).
TINY_SPACE = {"hidden_size": [16, 32], "num_layers": [1], "num_heads": [2], "batch_size": [64, 128]}


def write_bundle_slice(dest: Path, peaks: tuple[str, ...] = SLICE_PEAKS) -> Path:
    """The bundle's files, in its layout, holding only `peaks` (raw text kept as it is)."""
    source = load_settings().paths.data_dir
    (dest / "himalayan").mkdir(parents=True, exist_ok=True)
    (dest / "weather").mkdir(parents=True, exist_ok=True)
    members = pl.read_csv(source / "himalayan/members.csv.gz", infer_schema_length=0)
    members = members.filter(pl.col("peak_id").is_in(peaks))
    (dest / "himalayan/members.csv.gz").write_bytes(gzip.compress(members.write_csv().encode()))
    expeditions = pl.read_csv(source / "himalayan/expeditions.csv", infer_schema_length=0)
    expeditions.filter(pl.col("peakid").is_in(peaks)).write_csv(dest / "himalayan/expeditions.csv")
    details = pl.read_csv(
        source / "himalayan/expeditions_tidytuesday.csv.gz", infer_schema_length=0
    ).filter(pl.col("peak_id").is_in(peaks))
    (dest / "himalayan/expeditions_tidytuesday.csv.gz").write_bytes(
        gzip.compress(details.write_csv().encode())
    )
    shutil.copy(source / "himalayan/peaks.csv", dest / "himalayan/peaks.csv")
    weather = pl.read_parquet(source / "weather/era5_daily.parquet")
    weather.filter(pl.col("peakid").is_in(peaks)).write_parquet(dest / "weather/era5_daily.parquet")
    return dest


def isolated_paths(root: Path, *, prefect_sqlite: bool = True) -> dict[str, Any]:
    """Settings overrides that put every file a run writes under `root`. With `prefect_sqlite`
    (not for a stack on PostgreSQL), the Prefect server of those settings, `up`'s or a command's
    temporary one, finds its SQLite database there already migrated."""
    overrides = {
        "paths": {
            "var_dir": str(root / "var"),
            "warehouse": str(root / "var/warehouse.duckdb"),
            "runs_dir": str(root / "var/runs"),
        },
        "features": {"features_dir": str(root / "var/features")},
        "train": {"checkpoint_dir": str(root / "var/checkpoints")},
        "weather": {"cache_path": str(root / "var/cache/open-meteo")},
        "forecast": {"cache_path": str(root / "var/cache/open-meteo-forecast")},
        # A test's deployment runs start within 2 s, not the product's 5. A poll costs the
        # server about 25 ms of CPU: polling each second, an idle stack took 2.9 s of CPU a
        # minute (server and worker, from /proc over a minute), against 2.0 s every 2 s. Its
        # `up` starts no scorer (2 s of CPU each) unless it asks for one, as the end-to-end
        # stack does, and that one answers in one process (each loads the champion).
        "services": {
            "run_dir": str(root / "services"),
            "worker_query_s": 2.0,
            "scorer": False,
            "scorer_processes": 1,
        },
    }
    if prefect_sqlite:
        database = prefect_home(load_settings(overrides=overrides)) / "prefect.db"
        if not database.exists():
            database.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(migrated_prefect_database(), database)
    return overrides


# Prefect's own: create the database of PREFECT_HOME and migrate it to the newest schema.
_MIGRATE = (
    "import asyncio; from prefect.server.database import provide_database_interface; "
    "asyncio.run(provide_database_interface().create_db())"
)


@functools.cache
def migrated_prefect_database() -> Path:
    """An empty Prefect database at the installed Prefect's newest schema, made once per test
    session by Prefect itself (tests/session_shared.py). A server started on no database
    spends about 4 s of CPU migrating a new one, and the suite starts a dozen; one started on
    this copy checks the schema (0.1 s) and serves."""
    return made_once("prefect-database", _migrated_prefect_database)


def _migrated_prefect_database(folder: Path) -> Path:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env["PREFECT_HOME"] = str(folder)
    subprocess.run([sys.executable, "-c", _MIGRATE], env=env, check=True, timeout=300)
    return folder / "prefect.db"


@contextmanager
def migrated_prefect_harness() -> Iterator[None]:
    """Prefect's test harness, its server started on a copy of `migrated_prefect_database`.

    The harness makes its database in a new folder of its own (`mkdtemp`, which it also removes
    at exit); handing it a folder that holds the copy under the harness's file name spares its
    server the migration: 4.2 s of CPU and 4.6 s of wall time a harness (median of 4 runs each,
    taking turns)."""
    folder = Path(tempfile.mkdtemp())
    shutil.copyfile(migrated_prefect_database(), folder / "prefect-test.db")
    with (
        mock.patch.object(prefect.testing.utilities, "mkdtemp", return_value=str(folder)),
        prefect.testing.utilities.prefect_test_harness(server_startup_timeout=90),
    ):
        yield


def as_environment(overrides: dict[str, Any], prefix: str = "DEEPSUMMIT") -> dict[str, str]:
    """The same overrides as DEEPSUMMIT_<SECTION>__<FIELD> variables (for subprocesses)."""
    env: dict[str, str] = {}
    for key, value in overrides.items():
        name = f"{prefix}_{key.upper()}" if prefix == "DEEPSUMMIT" else f"{prefix}__{key.upper()}"
        if isinstance(value, dict):
            env.update(as_environment(value, name))
        else:
            env[name] = str(value)
    return env
