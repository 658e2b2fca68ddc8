"""The DuckDB warehouse: one file, every statement from a named file under `sql/`."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from pipeline.config import SQL_DIR


@cache
def sql(name: str) -> str:
    """The text of `sql/<name>.sql`."""
    path = SQL_DIR / f"{name}.sql"
    if not path.exists():
        raise FileNotFoundError(f"no SQL file {path}")
    return path.read_text()


@contextmanager
def connect(path: Path, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection to the warehouse file (created with its parent folder when missing)."""
    if not read_only:
        path.parent.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(str(path), read_only=read_only)
    try:
        yield con
    finally:
        con.close()


def run(con: duckdb.DuckDBPyConnection, name: str, params: dict[str, Any] | None = None) -> None:
    """Execute every statement of `sql/<name>.sql` (named `$param` placeholders)."""
    con.execute(sql(name), params or {})


def query(
    con: duckdb.DuckDBPyConnection, name: str, params: dict[str, Any] | None = None
) -> pl.DataFrame:
    """The result of `sql/<name>.sql` as a Polars frame."""
    # duckdb 2.0: a DB-API result (`execute`) has no `.pl()`; a relation (`sql`) has.
    return con.sql(sql(name), params=params or {}).pl()


def table_exists(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    return bool(
        con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [table]
        ).fetchall()[0][0]
    )


def frame_digest(frame: pl.DataFrame) -> str:
    """A content digest of a frame that ignores row order: sha256 over sorted row hashes."""
    if frame.is_empty():
        return hashlib.sha256(b"").hexdigest()
    row_hashes = frame.hash_rows(seed=0).sort()  # polars 2.x takes one seed
    header = ",".join(f"{name}:{dtype}" for name, dtype in frame.schema.items())
    return hashlib.sha256(header.encode() + row_hashes.to_numpy().tobytes()).hexdigest()


def table_digest(con: duckdb.DuckDBPyConnection, table: str) -> str:
    return frame_digest(con.sql(f'SELECT * FROM "{table}"').pl())
