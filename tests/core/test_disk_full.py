"""A full disk at each point where the pipeline writes its state: the ingest's commit, a weather
batch, the features snapshot and a training checkpoint. Each runs on a small tmpfs mounted for
the test and filled with a ballast file so that this write is the one that finds no room; each
must stop with one line (DiskFull, printed by the CLI as it is) naming what was not written, and
leave what was there before as it was."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import duckdb
import pytest
from features_tables import load_bundle
from flows_fixtures import isolated_paths, write_bundle_slice
from ingest_fixtures import bundle_head, write_sources
from machine import require
from services_fixtures import deepsummit, free_port
from synthetic import DIMENSIONS, synthetic_arrays
from weather_fixtures import weather_batch

from deepsummit.cli.exit_codes import ExitCode
from deepsummit.core import warehouse
from deepsummit.core.config import load_settings
from deepsummit.core.context import RunContext
from deepsummit.core.errors import DiskFull
from deepsummit.features.stage import build_features
from deepsummit.records.stage import ingest_records
from deepsummit.train.checkpoint import CHECKPOINT_FILE
from deepsummit.train.trainer import train_model
from deepsummit.weather import store

DISK_SIZE = "64m"
# Room left beside the ballast: less than any of the writes below needs.
ROOM_LEFT = 64 * 1024


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of DISK_SIZE mounted for the test (root only)."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_SIZE}", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    failed = mounted.stderr.strip() or f"mount exited {mounted.returncode}"
    require("a small tmpfs mounted to fill (root)", failed if mounted.returncode else None)
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)


def fill(disk: Path) -> Path:
    """A ballast file that leaves ROOM_LEFT bytes free on `disk`; its path."""
    ballast = disk / "ballast"
    with ballast.open("wb") as handle:
        os.posix_fallocate(handle.fileno(), 0, shutil.disk_usage(disk).free - ROOM_LEFT)
    return ballast


def table_digests(path: Path) -> dict[str, str]:
    """Every table of the warehouse and its content digest, opened as the next run opens it."""
    with warehouse.connect(path) as con:
        names = [row[0] for row in con.execute("SHOW TABLES").fetchall()]
        return {
            name: warehouse.frame_digest(con.sql(f'SELECT * FROM "{name}"').pl()) for name in names
        }


def file_digests(folder: Path) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def assert_one_line(error: DiskFull, path: Path, what: str) -> None:
    message = str(error)
    assert "\n" not in message
    assert message.startswith(f"{path}: the disk is full, {what} could not be written;")


def test_an_ingest_on_a_full_disk_says_so_and_keeps_the_warehouse(
    disk: Path, tmp_path: Path
) -> None:
    sources = write_sources(tmp_path, bundle_head("members.csv.gz", 200))
    settings = load_settings(
        overrides={
            "paths": {"warehouse": str(disk / "w.duckdb"), "runs_dir": str(tmp_path / "runs")},
            "sources": {"expedition_details": None, **sources},
        }
    )
    ingest_records(settings, RunContext(tmp_path / "run1"))
    before = table_digests(settings.paths.warehouse)

    Path(sources["members"]).write_bytes(bundle_head("members.csv.gz", 20_000))
    ballast = fill(disk)
    with pytest.raises(DiskFull) as full:
        ingest_records(settings, RunContext(tmp_path / "run2"))
    assert_one_line(full.value, settings.paths.warehouse, "the ingested records")
    ballast.unlink()
    assert table_digests(settings.paths.warehouse) == before


def test_the_command_line_prints_a_full_disk_as_its_error_line_without_a_traceback(
    disk: Path, tmp_path: Path
) -> None:
    overrides = isolated_paths(tmp_path)
    overrides["paths"] |= {
        "data_dir": str(write_bundle_slice(tmp_path / "data")),
        "warehouse": str(disk / "w.duckdb"),
    }
    overrides["services"].update(prefect_port=free_port(), mlflow_port=free_port())
    settings = load_settings(overrides=overrides)
    ingest_records(settings, RunContext(tmp_path / "first"))
    before = table_digests(settings.paths.warehouse)

    ballast = fill(disk)  # the same records again: their new blocks find no room
    result = deepsummit(overrides, "ingest")
    assert result.returncode == ExitCode.FAILED, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    # Prefect's own log lines aside (the task's and flow's state), the command's one error line.
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [
        f"error: {settings.paths.warehouse}: the disk is full, the ingested records could not be"
        " written; nothing was changed there, free some space and run again"
    ], result.stderr[-3000:]
    ballast.unlink()
    assert table_digests(settings.paths.warehouse) == before


def test_a_weather_batch_on_a_full_disk_says_so_and_keeps_the_stored_weather(disk: Path) -> None:
    path = disk / "w.duckdb"
    with warehouse.connect(path) as con:
        store.ensure_tables(con)
        store.store_batch(con, weather_batch(30))
    before = table_digests(path)

    ballast = fill(disk)
    with warehouse.connect(path) as con, pytest.raises(DiskFull) as full:
        store.store_batch(con, weather_batch(20_000, "r2", start=date(1960, 1, 1)))
    assert_one_line(full.value, path, "a batch of weather rows")
    ballast.unlink()
    assert table_digests(path) == before


def test_a_features_snapshot_on_a_full_disk_says_so_and_keeps_the_previous_one(
    disk: Path, tmp_path: Path
) -> None:
    path = tmp_path / "w.duckdb"
    with duckdb.connect(str(path)) as con:
        load_bundle(con, write_bundle_slice(tmp_path / "data"))
    settings = load_settings(
        overrides={
            "paths": {"warehouse": str(path), "runs_dir": str(tmp_path / "runs")},
            "features": {"features_dir": str(disk / "features")},
        }
    )
    first = build_features(settings, RunContext(tmp_path / "run1"))
    snapshot = file_digests(first.directory)
    tables = table_digests(path)

    ballast = fill(disk)  # the rebuild of the same snapshot finds no room for its files
    with pytest.raises(DiskFull) as full:
        build_features(settings, RunContext(tmp_path / "run2"))
    assert_one_line(full.value, first.directory, "the features snapshot")
    ballast.unlink()
    assert file_digests(first.directory) == snapshot
    assert table_digests(path) == tables


class Stopped(Exception):
    """The first run stops after its first epoch's checkpoint."""


def stop_after_first_epoch(record: object) -> None:
    raise Stopped


def test_a_checkpoint_on_a_full_disk_says_so_and_keeps_the_previous_one(disk: Path) -> None:
    settings = load_settings("tiny", overrides={"train": {"max_epochs": 3, "num_threads": 1}})
    train, validation = synthetic_arrays(500, seed=1), synthetic_arrays(100, seed=2)

    def fit(on_epoch_end=None) -> None:
        train_model(
            settings.train, settings.model, train, validation, DIMENSIONS, disk, on_epoch_end
        )

    with pytest.raises(Stopped):
        fit(stop_after_first_epoch)
    checkpoint = disk / CHECKPOINT_FILE
    before = file_digests(disk)
    assert list(before) == [CHECKPOINT_FILE]

    ballast = fill(disk)  # the resumed run's second epoch has no room for its checkpoint
    with pytest.raises(DiskFull) as full:
        fit()
    assert_one_line(full.value, checkpoint, "the training checkpoint")
    ballast.unlink()
    assert file_digests(disk) == before  # the first epoch's checkpoint, and nothing else
