"""What the processes of one test session share: a folder for the whole session (pytest-xdist's
workers, or the one pytest process), and values made once in it.

The controlling process makes the folder (tests/conftest.py: `pytest_configure`) and names it in
SHARED_DIR_VARIABLE, which the workers it starts inherit; it removes the folder at the end. A
session fixture is otherwise made once per worker: the two workers of `make test` each trained
the registry fixture and each migrated a Prefect database.
"""

from __future__ import annotations

import fcntl
import os
import pickle
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

SHARED_DIR_VARIABLE = "PYTEST_DEEPSUMMIT_SHARED_DIR"

T = TypeVar("T")


def made_once(name: str, make: Callable[[Path], T]) -> T:
    """`make(folder)`'s value, made once per test session: the first process to ask makes it in
    a folder of the session's and pickles it beside; the others wait on its lock, then read the
    pickle. For values every worker would make alike and the tests only read."""
    root = Path(os.environ[SHARED_DIR_VARIABLE])
    with (root / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        saved = root / f"{name}.pickle"
        if saved.is_file():
            return pickle.loads(saved.read_bytes())
        folder = root / name
        shutil.rmtree(folder, ignore_errors=True)  # what a make that failed left
        folder.mkdir()
        value = make(folder)
        saved.write_bytes(pickle.dumps(value))
        return value
