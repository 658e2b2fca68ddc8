"""Looking for a secret in every byte a run stored: each file under the given folders read as
bytes, and each SQLite database also cell by cell (a long text that spills onto SQLite's
overflow pages is cut by their page headers, so its bytes alone may not hold it whole). A
secret is looked for as written and URL-encoded (as it stands in a connection URL)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, quote_plus

SQLITE_HEADER = b"SQLite format 3\x00"


@dataclass(frozen=True)
class Hit:
    path: Path
    where: str  # "bytes" or "table.column"

    def __str__(self) -> str:
        return f"{self.path} ({self.where})"


def secret_forms(secret: str) -> tuple[bytes, ...]:
    """The secret as written and URL-encoded, each once."""
    forms = (secret, quote(secret, safe=""), quote_plus(secret))
    return tuple(dict.fromkeys(form.encode() for form in forms))


def find_secret(folders: Iterable[Path], secret: str) -> list[Hit]:
    """Every file under `folders` that holds `secret` in one of its forms, with where."""
    forms = secret_forms(secret)
    hits = []
    for path in _files(folders):
        data = path.read_bytes()
        if any(form in data for form in forms):
            hits.append(Hit(path, "bytes"))
        if data.startswith(SQLITE_HEADER):
            hits += [Hit(path, where) for where in _sqlite_cells_holding(path, forms)]
    return hits


def _files(folders: Iterable[Path]) -> Iterator[Path]:
    for folder in folders:
        yield from (p for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink())


def _sqlite_cells_holding(path: Path, forms: tuple[bytes, ...]) -> list[str]:
    """Where (`table.column`) the database at `path` holds one of `forms`, cell by cell; read-only,
    so that a database a live server writes is not changed by the look."""
    found = []
    with closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as con:
        listed = con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        tables = [name for (name,) in listed]
        for table in tables:
            cursor = con.execute(f'SELECT * FROM "{table}"')
            columns = [description[0] for description in cursor.description]
            for row in cursor:
                for column, value in zip(columns, row, strict=True):
                    cell = value.encode() if isinstance(value, str) else value
                    if isinstance(cell, bytes) and any(form in cell for form in forms):
                        found.append(f"{table}.{column}")
    return sorted(set(found))
