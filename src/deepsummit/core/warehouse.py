"""The DuckDB warehouse: one file, every statement from a named file under `deepsummit/sql/`.

DuckDB lets one process at a time open the file for writing, and no other process may open it
at all meanwhile. `connect` therefore waits for the lock (polling, up to
`warehouse.lock_timeout_s`) instead of failing at once, and when the wait runs out it raises
one line that names the process holding the file. Stages keep their connections short (the
weather stage opens one per stored response, never across an API call), so a wait is short.

Short connections would let two writers' stages interleave between them, so a stage that
writes the warehouse also holds `writer_lock` from reading its inputs to its result: an
exclusive flock on `<warehouse>.lock` beside the file. Every writer on the machine takes it
(a deployment run on the worker as much as a `deepsummit` command whose Prefect server is down
and which therefore shares no Prefect slot with anyone); the kernel drops it when its holder
dies, however it dies.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import cache
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from deepsummit.core.errors import BadInput, ServiceUnavailable
from deepsummit.core.sections import WarehouseConfig

DEFAULT_LOCK_TIMEOUT_S = WarehouseConfig().lock_timeout_s
# DuckDB's message when another process holds the file (duckdb 2.0):
#   IO Error: Could not set lock on file "/x/w.duckdb": Conflicting lock is held in
#   /usr/bin/python3.11 (PID 1234). See also https://duckdb.org/docs/current/connect/concurrency
_LOCK_CONFLICT = re.compile(
    r"Could not set lock on file .*?held in (?P<program>.*) \(PID (?P<pid>\d+)\)"
)
_FIRST_POLL_S = 0.05
_MAX_POLL_S = 1.0  # a lock released is noticed within a second
_MAX_COMMAND_CHARS = 160
SQL_FILES = files("deepsummit") / "sql"


class WarehouseLocked(ServiceUnavailable):
    """Another process held the warehouse file for the whole lock timeout."""


@cache
def sql_files() -> list[Traversable]:
    """Every statement file, in name order (package data: they ship inside the wheel)."""
    return sorted((p for p in SQL_FILES.iterdir() if p.name.endswith(".sql")), key=lambda p: p.name)


@cache
def sql(name: str) -> str:
    """The text of `deepsummit/sql/<name>.sql`."""
    path = SQL_FILES / f"{name}.sql"
    if not path.is_file():
        raise FileNotFoundError(f"no SQL file {name}.sql in {SQL_FILES}")
    return path.read_text()


@contextmanager
def connect(
    path: Path, read_only: bool = False, lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection to the warehouse file (created with its parent folder when missing).

    Waits up to `lock_timeout_s` while another process holds the file, then raises
    WarehouseLocked (one line naming the holder)."""
    if not read_only:
        path.parent.mkdir(parents=True, exist_ok=True)
    elif not path.exists():
        raise BadInput(f"{path}: no warehouse there; pass --warehouse, or run `deepsummit ingest`")
    con = _open_when_free(path, read_only, lock_timeout_s)
    try:
        yield con
    finally:
        con.close()


def _open_when_free(
    path: Path, read_only: bool, lock_timeout_s: float
) -> duckdb.DuckDBPyConnection:
    started = time.monotonic()
    poll_s = _FIRST_POLL_S
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only)
        except duckdb.IOException as error:
            conflict = _LOCK_CONFLICT.search(str(error))
            if conflict is None:
                raise
            remaining = lock_timeout_s - (time.monotonic() - started)
            if remaining <= 0:
                holder = lock_holder(int(conflict["pid"]), conflict["program"])
                raise WarehouseLocked(
                    f"{path} is locked by PID {conflict['pid']} ({holder}) for "
                    f"{lock_timeout_s:g} s; wait for it or stop it"
                ) from None
            time.sleep(min(poll_s, remaining))
            poll_s = min(2 * poll_s, _MAX_POLL_S)


def lock_holder(pid: int, program: str) -> str:
    """The command line of process `pid` as a person would type it ("deepsummit ingest"), or
    the program's name when /proc does not tell (another OS, the process already gone)."""
    try:
        arguments = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return Path(program).name
    words = [word for word in arguments.split("\0") if word]
    if not words:
        return Path(program).name
    # "python /venv/bin/deepsummit ingest": the script names the command, not the interpreter.
    if len(words) > 1 and Path(words[0]).name.startswith("python") and not words[1].startswith("-"):
        words = words[1:]
    command = " ".join([Path(words[0]).name, *words[1:]])
    return (
        command if len(command) <= _MAX_COMMAND_CHARS else command[: _MAX_COMMAND_CHARS - 1] + "…"
    )


def lock_file(warehouse: Path) -> Path:
    """The file whose flock a warehouse writer holds: `<warehouse>.lock`, beside it."""
    return warehouse.with_name(warehouse.name + ".lock")


@contextmanager
def writer_lock(warehouse: Path, holder: str, waiting: Callable[[str], None]) -> Iterator[None]:
    """Be the one writer of `warehouse` on this machine for the block; when another process is,
    `waiting` is told in one line who (what it wrote in the lock file: `holder`, its PID and
    since when) before this waits for as long as it takes."""
    path = lock_file(warehouse)
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            held_by = os.pread(descriptor, 4096, 0).decode(errors="replace").strip()
            waiting(f"waiting for {path}: held by {held_by or 'another process'}")
            fcntl.flock(descriptor, fcntl.LOCK_EX)
        since = datetime.now(UTC).isoformat(timespec="seconds")
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"{holder} (PID {os.getpid()}, since {since})".encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(descriptor, 0)  # the next waiter names no writer that has left
    finally:
        os.close(descriptor)  # releases the flock


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """One DuckDB transaction: committed when the block ends, rolled back when it raises. A
    commit that fails (a full disk) rolls back by itself; rolling it back again would hide its
    error behind "no transaction is active"."""
    con.begin()
    try:
        yield
    except BaseException:
        con.rollback()
        raise
    con.commit()


@contextmanager
def registered(con: duckdb.DuckDBPyConnection, **frames: pl.DataFrame) -> Iterator[None]:
    """Each frame as a view named by its keyword, for the statements of the block."""
    for name, frame in frames.items():
        con.register(name, frame)
    try:
        yield
    finally:
        for name in frames:
            con.unregister(name)


def run(con: duckdb.DuckDBPyConnection, name: str, params: dict[str, Any] | None = None) -> None:
    """Execute every statement of `deepsummit/sql/<name>.sql` (named `$param` placeholders)."""
    con.execute(sql(name), params or {})


def query(
    con: duckdb.DuckDBPyConnection, name: str, params: dict[str, Any] | None = None
) -> pl.DataFrame:
    """The result of `deepsummit/sql/<name>.sql` as a Polars frame."""
    # duckdb 2.0: a DB-API result (`execute`) has no `.pl()`; a relation (`sql`) has.
    return con.sql(sql(name), params=params or {}).pl()


def database_file(con: duckdb.DuckDBPyConnection) -> Path:
    """The warehouse file `con` is connected to (`:memory:`, as DuckDB names it, for none)."""
    # execute, not query: it also works while a caller left a result of its own unfetched.
    [(path,)] = con.execute(sql("warehouse_file")).fetchall()
    return Path(path or ":memory:")


def frame_digest(frame: pl.DataFrame) -> str:
    """A content digest of a frame that ignores row order: sha256 over sorted row hashes."""
    if frame.is_empty():
        return hashlib.sha256(b"").hexdigest()
    row_hashes = frame.hash_rows(seed=0).sort()  # polars 2.x takes one seed
    header = ",".join(f"{name}:{dtype}" for name, dtype in frame.schema.items())
    return hashlib.sha256(header.encode() + row_hashes.to_numpy().tobytes()).hexdigest()
