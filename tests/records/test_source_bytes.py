"""read_bytes: files and http(s) URLs, gzip by magic bytes, one clear error otherwise."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import stamina
from ingest_fixtures import http_folder  # noqa: F401 (fixture)
from scripted_server import Answer, scripted_server

from deepsummit.core.errors import SourceUnavailable, SourceUnreadable
from deepsummit.core.http_retry import DEFAULT_RETRY
from deepsummit.records.source_bytes import read_bytes

TEXT = b"peakid,pkname\nEVER,Everest\n"


def test_plain_file_is_returned_as_is(tmp_path: Path) -> None:
    path = tmp_path / "peaks.csv"
    path.write_bytes(TEXT)
    assert read_bytes(str(path)) == TEXT


def test_gzip_is_found_by_magic_bytes_not_by_name(tmp_path: Path) -> None:
    path = tmp_path / "peaks.csv"  # no .gz suffix
    path.write_bytes(gzip.compress(TEXT))
    assert read_bytes(str(path)) == TEXT


def test_truncated_gzip_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "members.csv.gz"
    path.write_bytes(gzip.compress(TEXT * 100)[:-20])
    with pytest.raises(SourceUnreadable, match=r"members\.csv\.gz: truncated or corrupt gzip"):
        read_bytes(str(path))


def test_missing_file_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(SourceUnreadable, match=r"nope\.csv: no such file"):
        read_bytes(str(tmp_path / "nope.csv"))


def test_url_is_fetched_and_decompressed(http_folder: tuple[Path, str]) -> None:  # noqa: F811
    folder, base = http_folder
    (folder / "members.csv.gz").write_bytes(gzip.compress(TEXT))
    assert read_bytes(f"{base}/members.csv.gz") == TEXT


def test_http_error_names_the_url(http_folder: tuple[Path, str]) -> None:  # noqa: F811
    _, base = http_folder
    with pytest.raises(SourceUnreadable, match=r"/absent\.csv: HTTP 404"):
        read_bytes(f"{base}/absent.csv")


def test_refused_connection_is_one_line() -> None:
    # Port 1 on loopback: nothing listens there, the connection is refused at once.
    with pytest.raises(SourceUnavailable, match=r"127\.0\.0\.1:1/x\.csv: cannot fetch") as error:
        read_bytes("http://127.0.0.1:1/x.csv", timeout_s=5)
    assert "\n" not in str(error.value)


def test_a_busy_server_is_asked_again() -> None:
    """A records source behind a server that answers 503 twice: fetched on the third try."""
    with scripted_server(Answer(503), Answer(503), Answer(200, body="a,b\n1,2")) as server:
        data = read_bytes(f"{server.url}/members.csv", timeout_s=5)
    assert json.loads(data) == "a,b\n1,2"
    assert [r.path for r in server.received] == ["/members.csv"] * 3


def test_a_server_busy_for_good_is_one_line_naming_it() -> None:
    # stamina's test mode skips the backoff's waits (15 s in all) and keeps the policy's
    # number of attempts: every one of them is still asked for.
    with (
        stamina.set_testing(True, attempts=DEFAULT_RETRY.attempts, cap=True),
        scripted_server(Answer(503)) as server,
        pytest.raises(SourceUnavailable, match=r"members\.csv.*503") as raised,
    ):
        read_bytes(f"{server.url}/members.csv", timeout_s=5)
    assert "\n" not in str(raised.value)
    assert len(server.received) == DEFAULT_RETRY.attempts
