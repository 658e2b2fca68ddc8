"""The secret scanner of the end-to-end search (tests/secret_scan.py) finds a planted secret: in
a log line, URL-encoded in a connection URL, and in a SQLite cell laid across the seam of two
overflow pages, where the file's bytes do not hold it in one piece; and it finds nothing where
there is none."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from secret_scan import Hit, find_secret

SECRET = "s3cret/p@ss:word"  # characters a URL encodes


def _database(text: str) -> bytes:
    """A SQLite database file with `text` in a row of its table `log`."""
    with closing(sqlite3.connect(":memory:")) as con:
        con.execute("CREATE TABLE log (id INTEGER PRIMARY KEY, message TEXT)")
        con.execute("INSERT INTO log (message) VALUES (?)", (text,))
        con.commit()
        return con.serialize()


def test_a_secret_in_a_log_line_and_url_encoded_in_another_file_is_found(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "worker.log").write_text(f"INFO opening study at {SECRET}\n")
    (tmp_path / "settings.json").write_text(
        '{"url": "postgresql://optuna:s3cret%2Fp%40ss%3Aword@db/optuna"}'
    )
    (tmp_path / "clean.log").write_text("INFO nothing to see\n")

    assert find_secret([tmp_path], SECRET) == [
        Hit(tmp_path / "logs" / "worker.log", "bytes"),
        Hit(tmp_path / "settings.json", "bytes"),
    ]


def test_a_secret_in_a_sqlite_cell_is_found_where_its_bytes_are_cut_by_a_page_seam(
    tmp_path: Path,
) -> None:
    # A text longer than a page continues on overflow pages, each starting with a 4-byte
    # pointer: some place of the secret in a text of one length puts it across that seam.
    length = 3 * 4096
    for offset in range(length - len(SECRET)):
        data = _database("x" * offset + SECRET + "y" * (length - len(SECRET) - offset))
        if SECRET.encode() not in data:
            break
    else:
        pytest.fail("no offset put the secret across a page seam")
    database = tmp_path / "prefect.db"
    database.write_bytes(data)

    assert find_secret([tmp_path], SECRET) == [Hit(database, "log.message")]


def test_nothing_is_found_where_the_secret_is_not(tmp_path: Path) -> None:
    (tmp_path / "mlflow.db").write_bytes(_database("a run with its parameters"))
    (tmp_path / "run.log").write_text("s3cret/p@ss:wor d\n")  # near, not the same

    assert find_secret([tmp_path], SECRET) == []
