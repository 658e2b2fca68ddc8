"""Fixtures of the records stage's tests: small source files written at test time, a DBF writer
(dbfread only reads), and a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import csv
import datetime as dt
import functools
import gzip
import http.server
import io
import struct
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from deepsummit.core.config import load_settings

BUNDLE = load_settings().paths.data_dir / "himalayan"


def csv_bytes(header: Sequence[str], rows: Sequence[Sequence[object]]) -> bytes:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue().encode()


def bundle_head(name: str, lines: int) -> bytes:
    """The header and first `lines` data lines of a bundle file (decompressed)."""
    data = (BUNDLE / name).read_bytes()
    if name.endswith(".gz"):
        data = gzip.decompress(data)
    return b"".join(data.splitlines(keepends=True)[: lines + 1])


def write_sources(folder: Path, members: bytes, expeditions: bytes | None = None) -> dict[str, str]:
    """Small TidyTuesday-layout sources in `folder` (all the bundle's peaks, its first 30
    expeditions unless given, `members` as given): the `sources` settings naming them."""
    files = {
        "peaks": ("peaks.csv", bundle_head("peaks.csv", 462)),
        "expeditions": ("expeditions.csv", expeditions or bundle_head("expeditions.csv", 30)),
        "members": ("members.csv", members),
    }
    sources = {}
    for name, (file_name, data) in files.items():
        (folder / file_name).write_bytes(data)
        sources[name] = str(folder / file_name)
    return sources


# (name, type, length, decimals) as the HDB program declares its fields
DbfField = tuple[str, str, int, int]


def dbf_bytes(fields: Sequence[DbfField], rows: Sequence[Sequence[object]]) -> bytes:
    """A dBASE III table (code page byte 0x03 = cp1252) as the HDB program writes them."""
    record_size = 1 + sum(length for _, _, length, _ in fields)
    header_size = 32 + 32 * len(fields) + 1
    today = dt.date(2024, 1, 1)
    out = bytearray(
        struct.pack(
            "<BBBBIHH20x",
            0x03,
            today.year - 1900,
            today.month,
            today.day,
            len(rows),
            header_size,
            record_size,
        )
    )
    out[29] = 0x03  # language driver: Windows ANSI (cp1252)
    for name, kind, length, decimals in fields:
        out += struct.pack("<11sc4xBB14x", name.encode(), kind.encode(), length, decimals)
    out += b"\r"
    for row in rows:
        out += b" "
        for (_, kind, length, _), value in zip(fields, row, strict=True):
            out += _dbf_value(kind, length, value)
    out += b"\x1a"
    return bytes(out)


def _dbf_value(kind: str, length: int, value: object) -> bytes:
    if value is None:
        return b" " * length
    if kind == "L":
        return b"T" if value else b"F"
    if kind == "D":
        text = value.strftime("%Y%m%d") if isinstance(value, dt.date) else str(value)
        return text.encode().ljust(length)
    raw = value if isinstance(value, bytes) else str(value).encode("cp1252")
    return raw.rjust(length) if kind == "N" else raw.ljust(length)


@pytest.fixture
def http_folder(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A folder and the base URL of a real HTTP server serving it on a free 127.0.0.1 port."""
    folder = tmp_path / "served"
    folder.mkdir()
    handler = functools.partial(QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield folder, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        """No request log on stderr."""


# A small native HDB export: two expeditions, one person on both (names spelt differently).
HDB_EXPEDITION_FIELDS: list[DbfField] = [
    ("EXPID", "C", 10, 0),
    ("PEAKID", "C", 4, 0),
    ("YEAR", "N", 4, 0),
    ("SEASON", "N", 1, 0),
    ("ROUTE1", "C", 30, 0),
    ("TOTMEMBERS", "N", 3, 0),
    ("SMTMEMBERS", "N", 3, 0),
    ("SMTDATE", "D", 8, 0),
    ("SUCCESS1", "L", 1, 0),
    ("TERMREASON", "N", 2, 0),
    ("HIGHPOINT", "N", 4, 0),
    ("O2USED", "L", 1, 0),
    ("COMRTE", "L", 1, 0),
    ("CAMPS", "N", 2, 0),
]
HDB_EXPEDITIONS: list[list[object]] = [
    [
        "EVER19101",
        "EVER",
        2019,
        1,
        "S Col-SE Ridge",
        3,
        2,
        dt.date(2019, 5, 23),
        True,
        1,
        8850,
        True,
        True,
        4,
    ],
    [
        "AMAD19301",
        "AMAD",
        2019,
        3,
        "SW Ridge",
        1,
        1,
        dt.date(2019, 11, 2),
        True,
        1,
        6814,
        False,
        False,
        2,
    ],
]
HDB_MEMBER_FIELDS: list[DbfField] = [
    ("EXPID", "C", 10, 0),
    ("MEMBID", "C", 2, 0),
    ("PEAKID", "C", 4, 0),
    ("MYEAR", "N", 4, 0),
    ("MSEASON", "N", 1, 0),
    ("FNAME", "C", 20, 0),
    ("LNAME", "C", 20, 0),
    ("SEX", "C", 1, 0),
    ("YOB", "N", 4, 0),
    ("CALCAGE", "N", 3, 0),
    ("CITIZEN", "C", 15, 0),
    ("STATUS", "C", 15, 0),
    ("HIRED", "L", 1, 0),
    ("MSUCCESS", "L", 1, 0),
    ("MO2USED", "L", 1, 0),
    ("MPERHIGHPT", "N", 4, 0),
    ("DEATH", "L", 1, 0),
    ("DEATHTYPE", "N", 2, 0),
    ("DEATHHGTM", "N", 4, 0),
]
HDB_MEMBERS: list[list[object]] = [
    [
        "EVER19101",
        "1",
        "EVER",
        2019,
        1,
        "Zoë",
        "Martín",
        "F",
        1980,
        39,
        "Spain",
        "Leader",
        False,
        True,
        True,
        8850,
        False,
        0,
        0,
    ],
    [
        "EVER19101",
        "2",
        "EVER",
        2019,
        1,
        "Pemba",
        "Sherpa",
        "M",
        0,
        0,
        "Nepal",
        "H-A Worker",
        True,
        True,
        True,
        8850,
        False,
        0,
        0,
    ],
    [
        "EVER19101",
        "3",
        "EVER",
        2019,
        0,
        "Ann",
        "Other",
        "F",
        1990,
        29,
        "UK",
        "Climber",
        False,
        False,
        False,
        0,
        False,
        0,
        0,
    ],
    [
        "AMAD19301",
        "1",
        "AMAD",
        2019,
        3,
        "ZOE",
        "martin",
        "F",
        1980,
        0,
        "Spain",
        "Leader",
        False,
        True,
        False,
        6814,
        True,
        4,
        6500,
    ],
]
PEAKS_HEADER = (
    "peakid",
    "pkname",
    "heightm",
    "himal",
    "location",
    "latitude",
    "longitude",
    "coord_source",
)
PEAKS_ROWS: list[list[object]] = [
    ["AMAD", "Ama Dablam", 6814, 12, "Khumbu Himal", 27.8529583, 86.8244595, "geocoded"],
    ["EVER", "Everest", 8849, 12, "Khumbu Himal", 27.9881, 86.9250, "published"],
]


def hdb_csv(fields: Sequence[DbfField], rows: Sequence[Sequence[object]]) -> bytes:
    """The same export as CSV (dates ISO, logicals True/False)."""
    return csv_bytes([name for name, *_ in fields], rows)
