"""Loaders: every layout read as strings; lines that cannot be split become bad lines with a
reason; a source that cannot be used at all raises one line naming it."""

from __future__ import annotations

import gzip
from pathlib import Path

import polars as pl
import pytest
from ingest_fixtures import (
    HDB_EXPEDITION_FIELDS,
    HDB_EXPEDITIONS,
    HDB_MEMBER_FIELDS,
    HDB_MEMBERS,
    bundle_head,
    csv_bytes,
    dbf_bytes,
    hdb_csv,
)

from deepsummit.core.errors import SourceUnreadable
from deepsummit.records import loaders as records

PEAKS_HEADER = "peakid,pkname,heightm,himal,location,latitude,longitude,coord_source\n"


def write(tmp_path: Path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def test_bundle_peaks_read_as_strings_with_empty_coord_source_named(tmp_path: Path) -> None:
    raw = records.load_source(
        write(tmp_path, "peaks.csv", bundle_head("peaks.csv", 462)), records.PEAKS
    )
    assert raw.rows_read == 462 and raw.bad_lines.is_empty()
    assert set(raw.rows.schema.values()) == {pl.String, pl.Int64}  # _row is the only number
    mapped = raw.mapped()
    no_coordinates = mapped.filter(pl.col("latitude").is_null())
    assert no_coordinates.height == 243
    assert no_coordinates["coord_source"].unique().to_list() == ["empty"]


def test_tidytuesday_members_map_to_clean_names(tmp_path: Path) -> None:
    location = write(tmp_path, "m.csv.gz", gzip.compress(bundle_head("members.csv.gz", 3)))
    mapped = records.load_source(location, records.MEMBERS).mapped()
    assert mapped["member_id"].to_list() == ["AMAD78301-01", "AMAD78301-02", "AMAD78301-03"]
    assert "peak_name" not in mapped.columns and mapped["peakid"][0] == "AMAD"
    assert mapped["highpoint_metres"][0] is None  # "NA" is missing
    assert mapped["climber_id"].null_count() == 3  # no person identity in this layout
    assert mapped["source"][0] == location


def test_malformed_line_is_a_bad_line_and_parsing_resumes(tmp_path: Path) -> None:
    text = PEAKS_HEADER + (
        "EVER,Everest,8849,12,Khumbu,27.9881,86.925,published\n"
        '"AMAD"x,Ama Dablam,6814,12,Khumbu,27.85,86.82,geocoded\n'  # text after a closing quote
        'LHOT,"Lhotse,8516,12,Khumbu,27.9617,86.9333,published\n'  # quote never closed
        "MAKA,Makalu,8485,14,Makalu,27.8897,87.0887,published\n"
    )
    raw = records.load_source(write(tmp_path, "peaks.csv", text.encode()), records.PEAKS)
    assert raw.rows["peakid"].to_list() == ["EVER", "MAKA"]  # the unclosed quote ate nothing
    assert raw.bad_lines["row_number"].to_list() == [2, 3]
    assert raw.bad_lines["reason"].str.starts_with("malformed CSV").all()
    assert raw.bad_lines["record"][0].startswith('"AMAD"x')
    assert raw.rows_read == 4


def test_wrong_column_count_is_a_bad_line(tmp_path: Path) -> None:
    text = PEAKS_HEADER + "EVER,Everest,8849\nMAKA,Makalu,8485,14,Makalu,27.9,87.1,published\n"
    raw = records.load_source(write(tmp_path, "peaks.csv", text.encode()), records.PEAKS)
    assert raw.bad_lines.row(0) == (
        1,
        "EVER,Everest,8849",
        "wrong column count: expected 8 fields, got 3",
    )
    assert raw.rows["peakid"].to_list() == ["MAKA"]


def test_non_utf8_bytes_cost_their_line_only(tmp_path: Path) -> None:
    data = PEAKS_HEADER.encode() + (
        b"KANG,Kangchenjunga,8586,9,Kangchenjunga,27.7,88.1,published\n"
        b"CHOY,Cho \xff\xfeOyu,8188,10,Khumbu,28.09,86.66,published\n"
    )
    raw = records.load_source(write(tmp_path, "peaks.csv", data), records.PEAKS)
    assert raw.rows["peakid"].to_list() == ["KANG"]
    assert raw.bad_lines["reason"].to_list() == ["non-UTF-8 bytes in the line"]
    assert "\ufffd" in raw.bad_lines["record"][0]  # stored as valid text, bytes marked


def test_blank_lines_are_not_rows_and_row_numbers_follow_lines(tmp_path: Path) -> None:
    text = PEAKS_HEADER + "\nEVER,Everest,8849,12,Khumbu,27.9881,86.925,published\n\n"
    raw = records.load_source(write(tmp_path, "peaks.csv", text.encode()), records.PEAKS)
    assert raw.rows_read == 1 and raw.rows["_row"].to_list() == [2]


@pytest.mark.parametrize("content", [b"", b"\n \n"])
def test_empty_file_is_unreadable(tmp_path: Path, content: bytes) -> None:
    with pytest.raises(SourceUnreadable, match=r"peaks\.csv: empty file"):
        records.load_source(write(tmp_path, "peaks.csv", content), records.PEAKS)


def test_missing_required_column_names_file_and_column(tmp_path: Path) -> None:
    text = bundle_head("members.csv.gz", 2).decode().replace("citizenship", "nationality")
    with pytest.raises(SourceUnreadable) as error:
        records.load_source(write(tmp_path, "members.csv", text.encode()), records.MEMBERS)
    assert str(error.value).endswith("members.csv: missing required column citizenship")


def test_header_only_file_reads_zero_rows(tmp_path: Path) -> None:
    raw = records.load_source(write(tmp_path, "peaks.csv", PEAKS_HEADER.encode()), records.PEAKS)
    assert raw.rows_read == 0 and list(raw.mapped().columns)[-1] == "source"


def hdb_members(tmp_path: Path, as_dbf: bool) -> pl.DataFrame:
    name, data = (
        ("MEMBERS.DBF", dbf_bytes(HDB_MEMBER_FIELDS, HDB_MEMBERS))
        if as_dbf
        else ("members.csv", hdb_csv(HDB_MEMBER_FIELDS, HDB_MEMBERS))
    )
    raw = records.load_source(write(tmp_path, name, data), records.HDB_MEMBERS)
    assert raw.rows_read == len(HDB_MEMBERS) and raw.bad_lines.is_empty()
    return raw.mapped().drop("source")


@pytest.mark.parametrize("as_dbf", [False, True], ids=["csv", "dbf"])
def test_native_hdb_members_map_to_clean_columns(tmp_path: Path, as_dbf: bool) -> None:
    mapped = hdb_members(tmp_path, as_dbf)
    assert mapped["member_id"].to_list() == [
        "EVER19101-01",
        "EVER19101-02",
        "EVER19101-03",
        "AMAD19301-01",
    ]
    assert mapped["season"].to_list() == ["Spring", "Spring", "Unknown", "Autumn"]
    # CALCAGE 0 means unknown: the age comes from the birth year, or stays missing.
    assert mapped["age"].to_list() == ["39", None, "29", "39"]
    assert mapped["highpoint_metres"].to_list() == ["8850", "8850", None, "6814"]
    assert mapped["death_cause"].to_list() == [None, None, None, "Fall"]
    assert mapped["death_height_metres"].to_list() == [None, None, None, "6500"]
    climbers = mapped["climber_id"].to_list()
    # One person (accents, case differ) links across expeditions; others stay apart.
    assert climbers[0] == climbers[3]
    assert len({climbers[0], climbers[1], climbers[2]}) == 3


def test_hdb_dbf_and_csv_give_the_same_rows(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    assert hdb_members(tmp_path / "a", as_dbf=True).equals(hdb_members(tmp_path / "b", False))


def test_hdb_folder_finds_its_tables(tmp_path: Path) -> None:
    write(tmp_path, "EXPED.DBF", dbf_bytes(HDB_EXPEDITION_FIELDS, HDB_EXPEDITIONS))
    mapped = records.load_source(str(tmp_path), records.HDB_EXPEDITIONS).mapped()
    assert mapped.select("expid", "season", "smtdate", "success", "style").rows() == [
        ("EVER19101", "Spring", "2019-05-23", "True", None),
        ("AMAD19301", "Autumn", "2019-11-02", "True", "solo"),
    ]
    assert mapped["source"][0] == str(tmp_path)


def test_dbf_is_recognised_without_its_suffix(tmp_path: Path) -> None:
    location = write(tmp_path, "export.bin", dbf_bytes(HDB_MEMBER_FIELDS, HDB_MEMBERS))
    assert records.load_source(location, records.HDB_MEMBERS).rows_read == len(HDB_MEMBERS)


def test_hdb_missing_column_names_the_column(tmp_path: Path) -> None:
    fields = [f for f in HDB_MEMBER_FIELDS if f[0] != "MSUCCESS"]
    rows = [
        [v for f, v in zip(HDB_MEMBER_FIELDS, r, strict=True) if f[0] != "MSUCCESS"]
        for r in HDB_MEMBERS
    ]
    location = write(tmp_path, "members.csv", csv_bytes([f[0] for f in fields], rows))
    with pytest.raises(SourceUnreadable, match=r"members\.csv: missing required column MSUCCESS"):
        records.load_source(location, records.HDB_MEMBERS)


def test_normalise_name_folds_accents_case_and_spacing() -> None:
    assert records.normalise_name("  Zoë   MARTÍN-Ruiz ") == "zoe martin ruiz"
    assert records.normalise_name(None) == ""
