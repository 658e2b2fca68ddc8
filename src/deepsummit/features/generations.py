"""Publishing a snapshot folder without a gap: every build writes a new generation folder, then
one rename turns the snapshot's path (a symbolic link) to it.

    <features_dir>/<digest[:12]>            -> .generations/<digest[:12]>.<unique>
    <features_dir>/.generations/<digest[:12]>.<unique>/   the files

A reader that opens `<digest[:12]>/<file>` always reaches a whole generation, the old one or the
new one, never none and never half of one: a link is replaced by `rename(2)`, which is atomic,
and a generation is complete before any link names it. Generations no link names (the one a
rebuild replaced, what a killed build left) are removed by the next publication, not by the one
that replaced them: a reader half-way through opening a file as the link turns still finds it.
Publications of one `features_dir` take turns (an advisory lock, released by the kernel when
its holder dies), so one never removes a generation another is still writing. A generation's
files reach the disk before a link names it, so a power cut cannot leave a link to empty files.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

GENERATIONS_DIR = ".generations"
LOCK_FILE = ".publish.lock"


def publish(directory: Path, write: Callable[[Path], None]) -> None:
    """Let `write` fill a new, empty generation folder, then make `directory` name it."""
    root = directory.parent
    generations = root / GENERATIONS_DIR
    generations.mkdir(parents=True, exist_ok=True)
    with _turn(root):
        _remove_unnamed_generations(root)
        generation = generations / f"{directory.name}.{uuid.uuid4().hex[:12]}"
        generation.mkdir()
        write(generation)
        _sync(generation)
        link = generations / f"{generation.name}.link"
        link.symlink_to(Path(GENERATIONS_DIR) / generation.name)  # relative: the root may move
        if directory.is_dir() and not directory.is_symlink():
            # A folder of a version before generations: moved aside once (a gap of one rename,
            # at the first rebuild after the upgrade), then removed by the next publication.
            directory.rename(generations / f"{directory.name}.{uuid.uuid4().hex[:12]}")
        os.replace(link, directory)
        _sync_entry(root)  # the link's new target, on disk too


@contextmanager
def _turn(root: Path) -> Iterator[None]:
    with (root / LOCK_FILE).open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield  # closing the file releases the lock


def _remove_unnamed_generations(root: Path) -> None:
    """Generations no snapshot names, and the links a killed publication left unused."""
    named = {os.readlink(p) for p in root.iterdir() if p.is_symlink()}
    for entry in (root / GENERATIONS_DIR).iterdir():
        if entry.is_symlink():
            entry.unlink()
        elif str(Path(GENERATIONS_DIR) / entry.name) not in named:
            shutil.rmtree(entry)


def _sync(folder: Path) -> None:
    """Every file and folder under `folder`, and `folder` itself, to the disk."""
    for entry in folder.rglob("*"):
        _sync_entry(entry)
    _sync_entry(folder)


def _sync_entry(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
