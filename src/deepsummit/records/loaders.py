"""The layouts of the Himalayan Database records, read as strings (deepsummit/records/
reading.py) under clean names; a loader never guesses types.

Layouts: members in the TidyTuesday 2020 layout, expeditions and peaks in the bundle layout, and
the native Himalayan Database export (uppercase columns, CSV or DBF) for members and expeditions,
mapped onto the same clean column names plus a `climber_id` that links one person's expeditions.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from pathlib import Path

import polars as pl

from deepsummit.core.errors import SourceUnreadable
from deepsummit.records.reading import BAD_LINE_SCHEMA, MISSING, ROW, Layout, RawTable, load_table


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
