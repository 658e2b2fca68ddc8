"""Loaders for the Himalayan Database records: every layout read as strings, under clean names.

A loader never guesses types: it splits the source into rows of raw strings (a `RawTable`), and
keeps the lines it cannot split (malformed quoting, wrong column count, bytes that are not text)
as bad lines with a reason. Typing and range checks happen per row in `validation`, so one bad
cell costs one row, never the file.

Layouts: members in the TidyTuesday 2020 layout, expeditions and peaks in the bundle layout, and
the native Himalayan Database export (uppercase columns, CSV or DBF) for members and expeditions,
mapped onto the same clean column names plus a `climber_id` that links one person's expeditions.
"""

from __future__ import annotations

import csv
import hashlib
import io
import re
import struct
import tempfile
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import dbfread
import polars as pl

from deepsummit.core.errors import SourceUnreadable
from deepsummit.records.io import read_bytes

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


# --- layouts ------------------------------------------------------------------------------------


def _missing_to_null(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.with_columns(
        pl.when(pl.col(pl.String).str.strip_chars().is_in(MISSING))
        .then(None)
        .otherwise(pl.col(pl.String).str.strip_chars())
        .name.keep()
    )


def _tidytuesday_members(rows: pl.DataFrame) -> pl.DataFrame:
    return _missing_to_null(rows).select(
        ROW,
        "expedition_id",
        "member_id",
        pl.col("peak_id").alias("peakid"),
        *[c for c in TIDYTUESDAY_MEMBERS_COLUMNS if c not in _TT_RENAMED],
        climber_id=pl.lit(None, pl.String),
    )


def _bundle_expeditions(rows: pl.DataFrame) -> pl.DataFrame:
    return _missing_to_null(rows)


def _tidytuesday_expeditions(rows: pl.DataFrame) -> pl.DataFrame:
    return _missing_to_null(rows).select(
        ROW,
        expid="expedition_id",
        year="year",
        peakid="peak_id",
        season="season",
        basecamp_date="basecamp_date",
        highpoint_date="highpoint_date",
        termination_date="termination_date",
        termination_reason="termination_reason",
        highpoint_metres="highpoint_metres",
        members="members",
        member_deaths="member_deaths",
        hired_staff="hired_staff",
        hired_staff_deaths="hired_staff_deaths",
        oxygen_used="oxygen_used",
        trekking_agency="trekking_agency",
    )


def _bundle_peaks(rows: pl.DataFrame) -> pl.DataFrame:
    rows = _missing_to_null(rows)
    # The bundle leaves coord_source blank where the source had no coordinates at all.
    no_coordinates = pl.col("latitude").is_null() & pl.col("longitude").is_null()
    return rows.with_columns(
        coord_source=pl.when(pl.col("coord_source").is_null() & no_coordinates)
        .then(pl.lit("empty"))
        .otherwise(pl.col("coord_source"))
    )


# Himalayan Database codes (HDB program guide; the same mapping as the TidyTuesday cleaning).
HDB_SEASONS = {"0": "Unknown", "1": "Spring", "2": "Summer", "3": "Autumn", "4": "Winter"}
HDB_CAUSES = {
    "0": "Unspecified",
    "1": "AMS",
    "2": "Exhaustion",
    "3": "Exposure / frostbite",
    "4": "Fall",
    "5": "Crevasse",
    "6": "Icefall collapse",
    "7": "Avalanche",
    "8": "Falling rock / ice",
    "9": "Disappearance (unexplained)",
    "10": "Illness (non-AMS)",
    "11": "Other",
    "12": "Unknown",
}


def _code(column: str, names: dict[str, str]) -> pl.Expr:
    """A coded column as its name; codes outside the table stay as read (validation rejects)."""
    value = pl.col(column).str.replace(r"\.0+$", "")
    return value.replace(names)


def _zero_is_missing(column: str) -> pl.Expr:
    """HDB numeric fields write 0 for "not known" (heights, ages, birth years)."""
    return (
        pl.when(pl.col(column).cast(pl.Float64, strict=False) == 0)
        .then(None)
        .otherwise(pl.col(column))
    )


def _truthy(column: str) -> pl.Expr:
    return pl.col(column).str.to_lowercase().is_in(["true", "t", "1", "y", "yes"])


def _hdb_members(rows: pl.DataFrame) -> pl.DataFrame:
    rows = _missing_to_null(rows)
    year = pl.col("MYEAR").cast(pl.Int64, strict=False)
    birth_year = _zero_is_missing("YOB").cast(pl.Int64, strict=False)
    member_number = pl.col("MEMBID").str.replace(r"\.0+$", "")
    member_number = (
        pl.when(member_number.str.contains(r"^\d$"))
        .then(pl.lit("0") + member_number)
        .otherwise(member_number)
    )
    return rows.select(
        ROW,
        expedition_id="EXPID",
        member_id=pl.col("EXPID") + pl.lit("-") + member_number,
        peakid="PEAKID",
        year="MYEAR",
        season=_code("MSEASON", HDB_SEASONS),
        sex="SEX",
        age=pl.coalesce(_zero_is_missing("CALCAGE"), (year - birth_year).cast(pl.String)),
        citizenship="CITIZEN",
        expedition_role="STATUS",
        hired="HIRED",
        highpoint_metres=_zero_is_missing("MPERHIGHPT"),
        success="MSUCCESS",
        solo="MSOLO",
        oxygen_used="MO2USED",
        died="DEATH",
        death_cause=pl.when(_truthy("DEATH")).then(_code("DEATHTYPE", HDB_CAUSES)),
        death_height_metres=pl.when(_truthy("DEATH")).then(_zero_is_missing("DEATHHGTM")),
        injured="INJURY",
        injury_type=pl.when(_truthy("INJURY")).then(_code("INJURYTYPE", HDB_CAUSES)),
        injury_height_metres=pl.when(_truthy("INJURY")).then(_zero_is_missing("INJURYHGTM")),
        climber_id=pl.struct(
            "FNAME", "LNAME", "CITIZEN", birth_year=birth_year.cast(pl.String)
        ).map_elements(_climber_id, return_dtype=pl.String),
    )


def _hdb_expeditions(rows: pl.DataFrame) -> pl.DataFrame:
    rows = _missing_to_null(rows)
    solo = pl.col("TOTMEMBERS").cast(pl.Float64, strict=False) == 1
    return rows.select(
        ROW,
        expid="EXPID",
        peakid="PEAKID",
        year="YEAR",
        season=_code("SEASON", HDB_SEASONS),
        route1="ROUTE1",
        totmembers="TOTMEMBERS",
        smtmembers="SMTMEMBERS",
        smtdate="SMTDATE",
        success="SUCCESS1",
        termreason=pl.col("TERMREASON").str.replace(r"\.0+$", ""),
        highpoint=_zero_is_missing("HIGHPOINT"),
        o2used="O2USED",
        commercial="COMRTE",
        camps="CAMPS",
        # The bundle's `style` marks one-member expeditions as solo; the export has no such column.
        style=pl.when(solo).then(pl.lit("solo")),
    )


def normalise_name(text: str | None) -> str:
    """Lowercase ASCII words: accents, punctuation and spacing differences do not split a person."""
    if not text:
        return ""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return " ".join(re.findall(r"[a-z0-9]+", ascii_text.lower()))


def _climber_id(person: dict[str, str | None]) -> str | None:
    """A stable person key from name + birth year (citizenship when the birth year is unknown)."""
    first, last = normalise_name(person["FNAME"]), normalise_name(person["LNAME"])
    if not (first or last):
        return None
    anchor = person["birth_year"] or f"citizen:{normalise_name(person['CITIZEN'])}"
    return hashlib.sha256(f"{first}|{last}|{anchor}".encode()).hexdigest()[:16]


TIDYTUESDAY_MEMBERS_COLUMNS = (
    "expedition_id",
    "member_id",
    "peak_id",
    "peak_name",
    "year",
    "season",
    "sex",
    "age",
    "citizenship",
    "expedition_role",
    "hired",
    "highpoint_metres",
    "success",
    "solo",
    "oxygen_used",
    "died",
    "death_cause",
    "death_height_metres",
    "injured",
    "injury_type",
    "injury_height_metres",
)
_TT_RENAMED = ("expedition_id", "member_id", "peak_id", "peak_name")  # peak_name: peaks has it

MEMBERS = Layout("raw_members", "members", TIDYTUESDAY_MEMBERS_COLUMNS, (), _tidytuesday_members)
EXPEDITIONS = Layout(
    "raw_expeditions",
    "expeditions",
    (
        "expid",
        "peakid",
        "year",
        "season",
        "route1",
        "totmembers",
        "smtmembers",
        "smtdate",
        "success",
        "termreason",
        "highpoint",
        "o2used",
        "commercial",
        "camps",
        "style",
    ),
    (),
    _bundle_expeditions,
)
# The TidyTuesday 2020 expeditions file (data/README.md §2b), joined on (expedition id, year).
EXPEDITION_DETAILS = Layout(
    "raw_expeditions_tidytuesday",
    "expedition_details",
    (
        "expedition_id",
        "peak_id",
        "peak_name",
        "year",
        "season",
        "basecamp_date",
        "highpoint_date",
        "termination_date",
        "termination_reason",
        "highpoint_metres",
        "members",
        "member_deaths",
        "hired_staff",
        "hired_staff_deaths",
        "oxygen_used",
        "trekking_agency",
    ),
    (),
    _tidytuesday_expeditions,
)
PEAKS = Layout(
    "raw_peaks",
    "peaks",
    ("peakid", "pkname", "heightm", "himal", "location", "latitude", "longitude", "coord_source"),
    (),
    _bundle_peaks,
)
HDB_MEMBERS = Layout(
    "raw_hdb_members",
    "members",
    (
        "EXPID",
        "MEMBID",
        "PEAKID",
        "MYEAR",
        "MSEASON",
        "FNAME",
        "LNAME",
        "SEX",
        "CITIZEN",
        "STATUS",
        "HIRED",
        "MSUCCESS",
        "MO2USED",
    ),
    (
        "YOB",
        "CALCAGE",
        "MSOLO",
        "MPERHIGHPT",
        "DEATH",
        "DEATHTYPE",
        "DEATHHGTM",
        "INJURY",
        "INJURYTYPE",
        "INJURYHGTM",
    ),
    _hdb_members,
)
HDB_EXPEDITIONS = Layout(
    "raw_hdb_expeditions",
    "expeditions",
    (
        "EXPID",
        "PEAKID",
        "YEAR",
        "SEASON",
        "ROUTE1",
        "TOTMEMBERS",
        "SMTMEMBERS",
        "SMTDATE",
        "SUCCESS1",
        "TERMREASON",
        "HIGHPOINT",
        "O2USED",
    ),
    ("COMRTE", "CAMPS"),
    _hdb_expeditions,
)


NOT_CONFIGURED = "not configured"


def empty_table(layout: Layout) -> RawTable:
    """A source that is not configured: no rows (its clean table is emptied on load)."""
    rows = pl.DataFrame(schema={ROW: pl.Int64, **dict.fromkeys(layout.columns, pl.String)})
    bad_lines = pl.DataFrame(schema=BAD_LINE_SCHEMA)
    return RawTable(layout, NOT_CONFIGURED, hashlib.sha256(b"").hexdigest(), rows, bad_lines)


def load_source(location: str, layout: Layout) -> RawTable:
    """Read one source in its layout; a native HDB export may also be given as its folder (the
    members or exped table in it, CSV or DBF)."""
    if layout in (HDB_MEMBERS, HDB_EXPEDITIONS):
        return load_table(_hdb_file(location, layout), layout, display=location)
    return load_table(location, layout)


_HDB_FILE_STEMS = {"members": ("members",), "expeditions": ("exped", "expeditions")}


def _hdb_file(location: str, layout: Layout) -> str:
    folder = Path(location)
    if not folder.is_dir():
        return location
    found = next(
        (
            path
            for path in sorted(folder.iterdir())
            if path.stem.lower() in _HDB_FILE_STEMS[layout.table]
            and path.suffix.lower() in (".dbf", ".csv")
        ),
        None,
    )
    if found is None:
        raise SourceUnreadable(location, f"no {layout.table} table (DBF or CSV) in this folder")
    return str(found)
