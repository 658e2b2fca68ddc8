"""The records stage end to end on real files, a real DuckDB file and a real HTTP server."""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path

import duckdb
import polars as pl
import pytest
from ingest_fixtures import (
    BUNDLE,
    HDB_EXPEDITION_FIELDS,
    HDB_EXPEDITIONS,
    HDB_MEMBER_FIELDS,
    HDB_MEMBERS,
    PEAKS_HEADER,
    PEAKS_ROWS,
    bundle_head,
    csv_bytes,
    dbf_bytes,
    hdb_csv,
    http_folder,  # noqa: F401 (fixture)
)

from pipeline.config import Settings, load_settings
from pipeline.context import RunContext
from pipeline.errors import SourceUnreadable
from pipeline.records.ingest import IngestReport, ingest_records


def settings_for(tmp_path: Path, **sources: str) -> Settings:
    return load_settings(
        overrides={
            "paths": {"warehouse": str(tmp_path / "w.duckdb"), "runs_dir": str(tmp_path / "runs")},
            "sources": sources,
        }
    )


def table(settings: Settings, sql: str) -> pl.DataFrame:
    with duckdb.connect(str(settings.paths.warehouse), read_only=True) as con:
        return con.sql(sql).pl()


@dataclass(frozen=True)
class BundleRuns:
    settings: Settings
    first: IngestReport
    second: IngestReport
    quarantine_after_first: pl.DataFrame


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> BundleRuns:
    """The bundle ingested twice into one warehouse (the second run must change nothing)."""
    tmp_path = tmp_path_factory.mktemp("bundle")
    settings = settings_for(tmp_path)
    first = ingest_records(settings, RunContext(tmp_path / "run1"))
    quarantine = table(settings, "SELECT * FROM quarantine ORDER BY table_name, row_number")
    second = ingest_records(settings, RunContext(tmp_path / "run2"))
    return BundleRuns(settings, first, second, quarantine)


def counts(report: IngestReport) -> dict[str, tuple[int, int, int]]:
    return {s.table: (s.read, s.clean, s.quarantined) for s in report.sources}


def test_bundle_rows_read_match_its_readme(bundle: BundleRuns) -> None:
    read = {table: values[0] for table, values in counts(bundle.first).items()}
    assert read == {"peaks": 462, "expeditions": 11_634, "members": 76_519}


def test_bundle_quarantine_is_exactly_the_known_bad_rows(bundle: BundleRuns) -> None:
    """On the bundle: members of the 26 peaks missing from peaks.csv (unknown peak id; one of
    them, MARD67001-01, also has season Unknown), two injuries recorded above Everest's summit
    (8870 and 8880 m), and one expedition without a season (DHA149001)."""
    members = pl.read_csv(BUNDLE / "members.csv.gz", infer_schema=False)
    peaks = pl.read_csv(BUNDLE / "peaks.csv", infer_schema=False)["peakid"]
    unknown_peak = members.filter(~pl.col("peak_id").is_in(peaks.implode()))
    assert unknown_peak.height == 379 and unknown_peak["peak_id"].n_unique() == 26

    quarantine = bundle.quarantine_after_first
    by_table = quarantine.group_by("table_name").len().sort("table_name").rows()
    assert by_table == [("expeditions", 1), ("members", 379 + 2)]
    assert (quarantine["reason"].str.contains("unknown peak id")).sum() == unknown_peak.height
    above_summit = quarantine.filter(pl.col("reason").str.starts_with("injury_height_metres"))
    assert above_summit["record"].str.extract(r'"member_id":"([^"]+)"').sort().to_list() == [
        "EVER16121-05",
        "EVER17104-26",
    ]
    season = quarantine.filter(pl.col("reason").str.contains("season"))
    assert season["record"].str.contains("DHA149001|MARD67001-01").all() and season.height == 2
    assert quarantine["record"].str.starts_with("{").all()  # the row as read, as JSON
    assert quarantine["load_digest"].str.len_chars().unique().to_list() == [64]


def test_counts_add_up_per_source_in_the_warehouse(bundle: BundleRuns) -> None:
    for source in bundle.first.sources:
        assert source.read == source.clean + source.quarantined
        name = source.table
        stored = table(
            bundle.settings,
            f"SELECT (SELECT count(*) FROM {name}) AS clean, "
            f"(SELECT count(*) FROM quarantine WHERE table_name = '{name}') AS quarantined",
        ).row(0)
        assert stored == (source.clean, source.quarantined)


def test_ids_repeating_after_a_century_are_both_kept(bundle: BundleRuns) -> None:
    members = table(
        bundle.settings, "SELECT year FROM members WHERE member_id = 'KANG10101-01' ORDER BY 1"
    )
    assert members["year"].to_list() == [1910, 2010]
    expeditions = table(bundle.settings, "SELECT year FROM expeditions WHERE expid = 'EVER21101'")
    assert sorted(expeditions["year"].to_list()) == [1921, 2021]


def test_geocoded_suspect_peaks_are_kept_and_flagged(bundle: BundleRuns) -> None:
    peaks = table(bundle.settings, "SELECT coord_source, count(*) AS n FROM peaks GROUP BY 1")
    assert dict(peaks.rows()) == {
        "published": 20,
        "parent-summit": 5,
        "geocoded": 172,
        "geocoded-suspect": 22,
        "empty": 243,
    }


def test_rerun_with_the_same_input_changes_nothing(bundle: BundleRuns) -> None:
    assert bundle.second.digests == bundle.first.digests
    assert counts(bundle.second) == counts(bundle.first)
    assert bundle.second.digest == bundle.first.digest
    quarantine = table(bundle.settings, "SELECT * FROM quarantine ORDER BY table_name, row_number")
    assert quarantine.equals(bundle.quarantine_after_first)  # quarantined_at kept too
    raw = table(
        bundle.settings, "SELECT count(*) AS n, count(DISTINCT _row) AS rows FROM raw_members"
    )
    assert raw.row(0) == (76_519, 76_519)


def test_report_renders_counts_reasons_and_data_docs(bundle: BundleRuns) -> None:
    text = bundle.first.render()
    assert "76,519" in text and "76,138" in text and "peakid: unknown peak id" in text
    assert bundle.first.expectations_passed
    assert bundle.first.data_docs.is_file()
    assert bundle.first.rows == {
        "peaks": 462,
        "expeditions": 11_633,
        "members": 76_138,
        "quarantine": 382,
    }


def test_url_sources_with_bad_rows(tmp_path: Path, http_folder: tuple[Path, str]) -> None:  # noqa: F811
    folder, base = http_folder
    members = bundle_head("members.csv.gz", 40).decode().splitlines()
    header, good = members[0], members[1:]
    bad = [
        good[0].replace(",France,", ',"France"x,'),  # text after a closing quote
        "AMAD78301,AMAD78301-99,AMAD",  # wrong column count
        good[1].replace("France", "Fran\udcffce"),  # a byte that is not UTF-8
        good[2].replace(
            "-03,AMAD,Ama Dablam,1978,Autumn,M,27,", "-93,AMAD,Ama Dablam,1978,Autumn,M,250,"
        ),
        good[3].replace("AMAD78301-04,AMAD", "AMAD78301-94,ZZZZ"),  # unknown peak
        good[4],  # duplicated key
    ]
    text = "\n".join([header, *good, *bad]) + "\n"
    (folder / "members.csv.gz").write_bytes(
        gzip.compress(text.encode("utf-8", errors="surrogateescape"))
    )
    (folder / "expeditions.csv").write_bytes(bundle_head("expeditions.csv", 30))
    (folder / "peaks.csv").write_bytes(bundle_head("peaks.csv", 462))
    settings = settings_for(
        tmp_path,
        members=f"{base}/members.csv.gz",
        expeditions=f"{base}/expeditions.csv",
        peaks=f"{base}/peaks.csv",
    )
    report = ingest_records(settings, RunContext(tmp_path / "run"))
    assert counts(report)["members"] == (46, 40, 6)
    assert counts(report)["expeditions"] == (30, 30, 0)
    reasons = table(
        settings,
        "SELECT row_number, reason FROM quarantine WHERE table_name = 'members' ORDER BY 1",
    ).rows()
    assert [number for number, _ in reasons] == list(range(41, 47))
    assert reasons[0][1].startswith("malformed CSV")
    assert reasons[1][1] == "wrong column count: expected 21 fields, got 3"
    assert reasons[2][1] == "non-UTF-8 bytes in the line"
    assert reasons[3][1] == "age = 250: in_range(1, 100)"
    assert reasons[4][1] == "peakid = ZZZZ: unknown peak id (not in peaks)"
    assert reasons[5][1] == "duplicate key (member_id, year): the first row is kept"
    sources = table(settings, "SELECT DISTINCT source FROM members")["source"].to_list()
    assert sources == [f"{base}/members.csv.gz"]


def test_native_hdb_export_fills_the_same_clean_tables(tmp_path: Path) -> None:
    (tmp_path / "MEMBERS.DBF").write_bytes(dbf_bytes(HDB_MEMBER_FIELDS, HDB_MEMBERS))
    (tmp_path / "exped.csv").write_bytes(hdb_csv(HDB_EXPEDITION_FIELDS, HDB_EXPEDITIONS))
    (tmp_path / "peaks.csv").write_bytes(csv_bytes(PEAKS_HEADER, PEAKS_ROWS))
    settings = settings_for(
        tmp_path,
        peaks=str(tmp_path / "peaks.csv"),
        hdb_members=str(tmp_path / "MEMBERS.DBF"),
        hdb_expeditions=str(tmp_path / "exped.csv"),
    )
    report = ingest_records(settings, RunContext(tmp_path / "run"))
    assert counts(report) == {"peaks": (2, 2, 0), "expeditions": (2, 2, 0), "members": (4, 3, 1)}
    joined = table(
        settings,
        "SELECT m.member_id, m.climber_id, e.smtdate FROM members m "
        "JOIN expeditions e ON e.expid = m.expedition_id AND e.year = m.year ORDER BY 1",
    )
    assert joined["member_id"].to_list() == ["AMAD19301-01", "EVER19101-01", "EVER19101-02"]
    climbers = joined["climber_id"].to_list()
    assert climbers[0] == climbers[1] != climbers[2]  # one person on two expeditions
    assert str(joined["smtdate"][1]) == "2019-05-23"
    layouts = {s.table: s.layout for s in report.sources}
    assert layouts == {"peaks": "peaks", "expeditions": "hdb_expeditions", "members": "hdb_members"}


def test_unreadable_source_raises_one_line_and_writes_nothing(tmp_path: Path) -> None:
    broken = tmp_path / "members.csv.gz"
    broken.write_bytes(gzip.compress(bundle_head("members.csv.gz", 500))[:-40])
    settings = settings_for(tmp_path, members=str(broken))
    with pytest.raises(SourceUnreadable, match=r"members\.csv\.gz: truncated or corrupt gzip"):
        ingest_records(settings, RunContext(tmp_path / "run"))
    assert not settings.paths.warehouse.exists()
