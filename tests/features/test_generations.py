"""A snapshot's path always leads to a whole snapshot, while it is rebuilt and after a build
killed while writing it; replaced generations are removed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from features_tables import settings_for

import deepsummit
from deepsummit.contracts.snapshot import PREPROCESSING_FILE, newest_features_dir
from deepsummit.core.context import RunContext
from deepsummit.features.generations import GENERATIONS_DIR, publish
from deepsummit.features.stage import build_features

pytest_plugins = ["features_fixtures"]


def snapshot_files(directory: Path) -> set[str]:
    return {str(p.relative_to(directory)) for p in directory.rglob("*")}


def test_a_reader_always_finds_a_whole_snapshot_while_it_is_rebuilt(
    two_peaks: Path, tmp_path: Path
) -> None:
    settings = settings_for(tmp_path, two_peaks)
    report = build_features(settings, RunContext(tmp_path / "run"))
    directory = report.directory
    expected = snapshot_files(directory)
    stop = threading.Event()
    reads: list[str | None] = []  # None: a whole snapshot; else what the reader found wrong

    def read() -> None:
        while not stop.is_set():
            try:
                found = snapshot_files(directory)
                recorded = json.loads((directory / PREPROCESSING_FILE).read_text())
            except (OSError, ValueError) as error:
                reads.append(repr(error))
                continue
            if found != expected:
                reads.append(f"files missing: {sorted(expected - found)}")
            elif recorded["extra"]["snapshot_digest"] != report.snapshot_digest:
                reads.append("another snapshot's preprocessing")
            else:
                reads.append(None)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for _ in range(3):  # the same records: the same digest, its folder replaced each time
            assert build_features(settings, RunContext(tmp_path / "run")).directory == directory
    finally:
        stop.set()
        reader.join()

    assert len(reads) > 100
    assert [problem for problem in reads if problem] == []
    assert newest_features_dir(settings.features.features_dir) == directory
    # The current generation, and the one the last rebuild replaced (removed by the next).
    assert len(list((directory.parent / GENERATIONS_DIR).iterdir())) == 2


# Publishes a snapshot whose writer SIGKILLs its process half-way (after one of two files).
KILLED_PUBLICATION = """
import os, signal, sys
from pathlib import Path
from deepsummit.features.generations import publish

def write(folder):
    (folder / "first").write_text("new")
    os.kill(os.getpid(), signal.SIGKILL)

publish(Path(sys.argv[1]), write)
"""


def write_both(content: str):
    def write(folder: Path) -> None:
        for name in ("first", "second"):
            (folder / name).write_text(content)

    return write


def test_a_publication_killed_half_way_leaves_the_previous_snapshot(tmp_path: Path) -> None:
    directory = tmp_path / "snapshot"
    generations = tmp_path / GENERATIONS_DIR
    publish(directory, write_both("old"))
    (previous,) = generations.iterdir()
    environment = os.environ | {"PYTHONPATH": str(Path(deepsummit.__file__).parents[1])}
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_PUBLICATION, str(directory)], env=environment, timeout=60
    )
    assert killed.returncode == -signal.SIGKILL
    assert {p.name: p.read_text() for p in directory.iterdir()} == {"first": "old", "second": "old"}
    (left_over,) = set(generations.iterdir()) - {previous}

    publish(directory, write_both("new"))
    assert (directory / "second").read_text() == "new"
    assert left_over not in set(generations.iterdir())


def test_a_folder_of_an_older_version_becomes_a_generation(tmp_path: Path) -> None:
    """A snapshot folder written before generations existed is replaced, then removed."""
    directory = tmp_path / "snapshot"
    directory.mkdir()
    (directory / "first").write_text("old")
    publish(directory, write_both("new"))
    assert directory.is_symlink() and (directory / "first").read_text() == "new"
    publish(directory, write_both("newer"))
    generations = list((tmp_path / GENERATIONS_DIR).iterdir())
    assert len(generations) == 2 and all((g / "second").exists() for g in generations)
    assert not any((g / "first").read_text() == "old" for g in generations)
