"""Reading a records source as strings: every row split into raw strings (a `RawTable`), and
the lines it cannot split (malformed quoting, wrong column count, bytes that are not text) kept
as bad lines with a reason. Typing and range checks happen per row in `validation`, so one bad
cell costs one row, never the file. CSV and the native export's DBF files alike.
"""

from __future__ import annotations

import csv
import hashlib
import io
import re
import struct
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import dbfread
import polars as pl

from deepsummit.core.errors import SourceUnreadable
from deepsummit.records.source_bytes import read_bytes

ROW = "_row"  # 1-based data row number in the source (line of the record after the header)
MISSING = ("", "NA")  # how the layouts spell a missing value
_NOT_TEXT = re.compile("[\udc80-\udcff]")  # bytes that were not UTF-8, kept by surrogateescape
BAD_LINE_SCHEMA = {"row_number": pl.Int64, "record": pl.String, "reason": pl.String}


@dataclass(frozen=True)
class RawTable:
    """One source split into rows of raw strings, plus the lines that could not be split."""

    layout: Layout
    source: str  # the location as given
    load_digest: str  # sha256 of the (decompressed) source bytes
    rows: pl.DataFrame  # the layout's columns as strings (absent optional ones null) + `_row`
    bad_lines: pl.DataFrame  # row_number, record (the raw text), reason

    @property
    def rows_read(self) -> int:
        return self.rows.height + self.bad_lines.height

    def mapped(self) -> pl.DataFrame:
        """The rows under the clean table's column names (still strings), with `_row`."""
        return self.layout.to_clean(self.rows).with_columns(source=pl.lit(self.source))

    def records_json(self) -> pl.DataFrame:
        """`_row` and the row as read, as a JSON object of the raw strings."""
        columns = [c for c in self.layout.columns if c in self.rows.columns]
        return self.rows.select(ROW, record=pl.struct(columns).struct.json_encode())


@dataclass(frozen=True)
class Layout:
    """A source layout: its columns and how its rows map onto a clean table."""

    name: str  # raw table name in the warehouse
    table: str  # the clean table it feeds
    required: tuple[str, ...]
    optional: tuple[str, ...]
    to_clean: Callable[[pl.DataFrame], pl.DataFrame]

    @property
    def columns(self) -> tuple[str, ...]:
        return self.required + self.optional


# --- reading ------------------------------------------------------------------------------------


def load_table(location: str, layout: Layout, display: str | None = None) -> RawTable:
    """Read `location` (path or URL; CSV, gzip CSV or DBF) in `layout`.

    `display` is the name used in messages and the `source` column (default: `location`).
    Raises SourceUnreadable when the source as a whole cannot be used (unreadable, empty, no
    header, a required column missing).
    """
    source = display or location
    data = read_bytes(location)
    digest = hashlib.sha256(data).hexdigest()
    if _is_dbf(data, location):
        header, rows, bad = _split_dbf(source, data)
    else:
        header, rows, bad = _split_csv(source, data)
    repeated = sorted({name for name in header if header.count(name) > 1})
    if repeated:
        raise SourceUnreadable(source, f"column {', '.join(repeated)} appears more than once")
    missing = [column for column in layout.required if column not in header]
    if missing:
        raise SourceUnreadable(source, f"missing required column {', '.join(missing)}")
    columns = list(zip(*(fields for _, fields in rows), strict=True)) or [()] * len(header)
    frame = pl.DataFrame(
        dict(zip(header, columns, strict=True)), schema=dict.fromkeys(header, pl.String)
    )
    frame = frame.select(
        pl.Series(ROW, [number for number, _ in rows], dtype=pl.Int64),
        *[pl.col(c) if c in header else pl.lit(None, pl.String).alias(c) for c in layout.columns],
    )
    bad_lines = pl.DataFrame(bad, schema=BAD_LINE_SCHEMA, orient="row")
    return RawTable(layout, source, digest, frame, bad_lines)


def _split_csv(
    source: str, data: bytes
) -> tuple[list[str], list[tuple[int, list[str]]], list[tuple[int, str, str]]]:
    """Header, good rows (row number, fields) and bad lines (row number, text, reason).

    Decoding with surrogateescape keeps every byte, so a line with invalid UTF-8 is found and
    quarantined on its own. Each record is parsed from its own start line: a stray quote costs
    its line, it cannot swallow the rest of the file.
    """
    text = data.decode("utf-8", errors="surrogateescape").removeprefix("\ufeff")
    lines = list(io.StringIO(text, newline=""))
    start = next((i for i, line in enumerate(lines) if line.strip()), None)
    if start is None:
        raise SourceUnreadable(source, "empty file (no header row)")
    if _NOT_TEXT.search(lines[start]):
        raise SourceUnreadable(source, "header row is not UTF-8 text")
    header = [name.strip() for name in next(csv.reader([lines[start]]))]
    rows: list[tuple[int, list[str]]] = []
    bad: list[tuple[int, str, str]] = []
    index = start + 1
    check_bytes = _NOT_TEXT.search(text) is not None  # the per-row search only when needed
    while index < len(lines):
        index = _read_records(lines, index, start, len(header), check_bytes, rows, bad)
    return header, rows, bad


def _read_records(
    lines: list[str],
    begin: int,
    header_line: int,
    width: int,
    check_bytes: bool,
    rows: list[tuple[int, list[str]]],
    bad: list[tuple[int, str, str]],
) -> int:
    """Parse records from line `begin` until the end or until a line must be condemned alone;
    returns the line to resume from. Data row numbers count lines after the header."""
    reader = csv.reader((lines[i] for i in range(begin, len(lines))), strict=True)
    consumed = 0
    try:
        for fields in reader:
            first, used, consumed = begin + consumed, reader.line_num - consumed, reader.line_num
            if not fields:
                continue  # a blank line carries no row
            number = first - header_line
            if len(fields) == width and not (check_bytes and _NOT_TEXT.search("".join(fields))):
                rows.append((number, fields))
                continue
            if used > 1 and len(fields) != width:
                # A stray quote ran over line ends: condemn its line only and resume after it.
                bad.append((number, _printable(lines[first]), "malformed CSV: unbalanced quote"))
                return first + 1
            raw = _printable("".join(lines[first : first + used]))
            if len(fields) != width:
                reason = f"wrong column count: expected {width} fields, got {len(fields)}"
                bad.append((number, raw, reason))
            else:
                bad.append((number, raw, "non-UTF-8 bytes in the line"))
    except csv.Error as error:
        first = begin + consumed
        bad.append((first - header_line, _printable(lines[first]), f"malformed CSV: {error}"))
        return first + 1
    return len(lines)


def _printable(text: str) -> str:
    """The raw text with undecodable bytes shown as U+FFFD (the warehouse stores valid text)."""
    raw = text.rstrip("\r\n").encode("utf-8", errors="surrogateescape")
    return raw.decode("utf-8", errors="replace")


def _is_dbf(data: bytes, location: str) -> bool:
    """A dBASE/FoxPro table: by name, or by a header whose sizes account for the whole file."""
    if location.lower().endswith(".dbf"):
        return True
    if len(data) < 32 or data[0] not in {0x03, 0x30, 0x31, 0x83, 0x8B, 0xF5}:
        return False
    count, header_size, record_size = struct.unpack("<IHH", data[4:12])
    body = header_size + count * record_size
    return header_size >= 33 and len(data) in (body, body + 1)


def _split_dbf(
    source: str, data: bytes
) -> tuple[list[str], list[tuple[int, list[str]]], list[tuple[int, str, str]]]:
    """DBF rows as strings (dates ISO, logicals True/False), decoded per row with the table's
    code page, so an undecodable value costs its row only."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "table.dbf"
        path.write_bytes(data)
        try:
            table = dbfread.DBF(str(path), raw=True, ignore_missing_memofile=True)
            header = [name.upper() for name in table.field_names]
            types = {field.name.upper(): field.type for field in table.fields}
            records = [{k.upper(): v for k, v in record.items()} for record in table]
        except (ValueError, struct.error, dbfread.DBFNotFound, OSError) as error:
            raise SourceUnreadable(source, f"not a readable DBF table ({error})") from None
        encoding = table.encoding
    rows: list[tuple[int, list[str]]] = []
    bad: list[tuple[int, str, str]] = []
    for number, record in enumerate(records, start=1):
        try:
            rows.append((number, [_dbf_text(record[n], types[n], encoding) for n in header]))
        except UnicodeDecodeError:
            text = b"|".join(record[name] or b"" for name in header)
            bad.append((number, text.decode(encoding, errors="replace"), f"not {encoding} text"))
    return header, rows, bad


def _dbf_text(value: bytes | None, field_type: str, encoding: str) -> str:
    text = (value or b"").decode(encoding).strip()
    if field_type == "L":
        return {"T": "True", "Y": "True", "F": "False", "N": "False"}.get(text.upper(), "")
    if field_type == "D" and re.fullmatch(r"\d{8}", text):
        return f"{text[:4]}-{text[4:6]}-{text[6:]}"  # an impossible date stays visible as such
    return text
