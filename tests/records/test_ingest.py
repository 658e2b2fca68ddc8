"""The records stage end to end on real files, a real DuckDB file and a real HTTP server."""

from __future__ import annotations

import gzip
import io
import multiprocessing
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    write_sources,
)

from deepsummit.core import warehouse
from deepsummit.core.config import Settings, load_settings
from deepsummit.core.context import RunContext
from deepsummit.core.errors import PipelineError, SourceUnreadable
from deepsummit.records.stage import IngestReport, ingest_records


def overrides_for(tmp_path: Path, ingest: dict[str, Any] | None = None, **sources: str) -> dict:
    return {
        "paths": {"warehouse": str(tmp_path / "w.duckdb"), "runs_dir": str(tmp_path / "runs")},
        # A test of its own sources leaves the bundle's expedition details out.
        "sources": {"expedition_details": None, **sources} if sources else {},
        "ingest": ingest or {},
    }


def settings_for(tmp_path: Path, ingest: dict[str, Any] | None = None, **sources: str) -> Settings:
    return load_settings(overrides=overrides_for(tmp_path, ingest, **sources))


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
    assert read == {
        "peaks": 462,
        "expeditions": 11_634,
        "expedition_details": 10_364,
        "members": 76_519,
    }


def test_bundle_quarantine_is_exactly_the_known_bad_rows(bundle: BundleRuns) -> None:
    """On the bundle: members of the 26 peaks missing from peaks.csv (unknown peak id; one of
    them, MARD67001-01, also has season Unknown), two injuries recorded above Everest's summit
    (8870 and 8880 m), one expedition without a season (DHA149001), and seven expeditions whose
    summit date lies outside their season (EVER21101 of 1921, a Spring expedition summiting in
    September, among them)."""
    members = pl.read_csv(BUNDLE / "members.csv.gz", infer_schema=False)
    peaks = pl.read_csv(BUNDLE / "peaks.csv", infer_schema=False)["peakid"]
    unknown_peak = members.filter(~pl.col("peak_id").is_in(peaks.implode()))
    assert unknown_peak.height == 379 and unknown_peak["peak_id"].n_unique() == 26

    details = pl.read_csv(BUNDLE / "expeditions_tidytuesday.csv.gz", infer_schema=False)
    details_unknown_peak = details.filter(~pl.col("peak_id").is_in(peaks.implode()))
    details_no_season = details.filter(pl.col("season") == "Unknown")
    assert (details_unknown_peak.height, details_no_season.height) == (59, 2)
    details_bad = details_unknown_peak.join(details_no_season, on=details.columns, how="full")
    assert details_bad.height == 60  # one expedition has both

    quarantine = bundle.quarantine_after_first
    by_table = quarantine.group_by("table_name").len().sort("table_name").rows()
    assert by_table == [
        ("expedition_details", 60),
        ("expeditions", 1 + 7),
        ("members", 379 + 2),
    ]
    assert (quarantine["reason"].str.contains("unknown peak id")).sum() == (
        unknown_peak.height + details_unknown_peak.height
    )
    above_summit = quarantine.filter(pl.col("reason").str.starts_with("injury_height_metres"))
    assert above_summit["record"].str.extract(r'"member_id":"([^"]+)"').sort().to_list() == [
        "EVER16121-05",
        "EVER17104-26",
    ]
    # Season Unknown: DHA149001 and MARD67001, in the expedition files and among the members.
    reason = pl.col("reason")
    season = quarantine.filter(reason.str.contains("season") & ~reason.str.starts_with("smtdate"))
    assert season["record"].str.contains("DHA149001|MARD67001").all() and season.height == 4
    outside_season = quarantine.filter(reason.str.starts_with("smtdate outside its season"))
    assert sorted(outside_season["record"].str.extract(r'"expid":"([^"]+)"').to_list()) == [
        "AMAD08401", "ANN115402", "EVER21101", "KANG29201", "KWSR78101", "LHAY11301", "TAWO09401",
    ]  # fmt: skip
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
    expeditions = table(bundle.settings, "SELECT year FROM expeditions WHERE expid = 'EVER22101'")
    assert sorted(expeditions["year"].to_list()) == [1922, 2022]


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
        "expeditions": 11_626,
        "expedition_details": 10_304,
        "members": 76_138,
        "quarantine": 449,
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
    assert counts(report) == {
        "peaks": (2, 2, 0),
        "expeditions": (2, 2, 0),
        "expedition_details": (0, 0, 0),  # not configured: the export has no such table
        "members": (4, 3, 1),
    }
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
    assert layouts == {
        "peaks": "peaks",
        "expeditions": "hdb_expeditions",
        "expedition_details": "expeditions_tidytuesday",  # empty: not configured
        "members": "hdb_members",
    }


def test_unreadable_source_raises_one_line_and_writes_nothing(tmp_path: Path) -> None:
    broken = tmp_path / "members.csv.gz"
    broken.write_bytes(gzip.compress(bundle_head("members.csv.gz", 500))[:-40])
    settings = settings_for(tmp_path, members=str(broken))
    with pytest.raises(SourceUnreadable, match=r"members\.csv\.gz: truncated or corrupt gzip"):
        ingest_records(settings, RunContext(tmp_path / "run"))
    assert not settings.paths.warehouse.exists()


def stored_state(settings: Settings) -> dict[str, str]:
    """Every table of the warehouse and its content digest (quarantined_at included)."""
    with warehouse.connect(settings.paths.warehouse, read_only=True) as con:
        names = [row[0] for row in con.execute("SHOW TABLES").fetchall()]
        return {
            name: warehouse.frame_digest(con.sql(f'SELECT * FROM "{name}"').pl()) for name in names
        }


def test_a_truncated_but_parseable_members_file_is_refused_and_the_tables_stay(
    tmp_path: Path,
) -> None:
    members = bundle_head("members.csv.gz", 200)
    sources = write_sources(tmp_path, members)
    settings = settings_for(tmp_path, **sources)
    first = ingest_records(settings, RunContext(tmp_path / "run1"))
    before = stored_state(settings)
    assert {"members", "raw_members", "quarantine"} <= set(before)

    # A download cut off mid-line: the header and the first 100 or so rows parse, the last
    # line is a stub of the wrong width.
    Path(sources["members"]).write_bytes(members[: len(members) // 2])
    with pytest.raises(PipelineError) as refused:
        ingest_records(settings, RunContext(tmp_path / "run2"))
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"{sources['members']}: would leave ")
    assert f"where {counts(first)['members'][1]} are stored" in message
    assert "more than ingest.max_shrink = 5%); nothing written" in message
    assert message.endswith("pass --allow-shrink")
    assert stored_state(settings) == before  # raw, clean and quarantine tables as they were

    allowed = ingest_records(
        settings_for(tmp_path, ingest={"allow_shrink": True}, **sources),
        RunContext(tmp_path / "run3"),
    )
    read, clean, quarantined = counts(allowed)["members"]
    assert read == clean + quarantined and clean < counts(first)["members"][1]
    assert table(settings, "SELECT count(*) AS n FROM members")["n"][0] == clean
    assert table(settings, "SELECT count(*) AS n FROM raw_members")["n"][0] == read - 1


def test_members_moved_to_another_file_replace_the_old_files_raw_rows(tmp_path: Path) -> None:
    lines = bundle_head("members.csv.gz", 100).decode().splitlines()
    header, rows = lines[0], lines[1:]
    wrong_width = "AMAD78301,AMAD78301-99,AMAD"  # quarantined: the old file's rows go there too
    old = "\n".join([header, *rows[:40], wrong_width]) + "\n"
    sources = write_sources(tmp_path, old.encode())
    first = ingest_records(settings_for(tmp_path, **sources), RunContext(tmp_path / "run1"))
    assert counts(first)["members"] == (41, 40, 1)

    # `deepsummit ingest --members OTHER_FILE`: another path, other rows.
    moved = tmp_path / "elsewhere" / "members.csv"
    moved.parent.mkdir()
    moved.write_text("\n".join([header, *rows[40:]]) + "\n")
    settings = settings_for(tmp_path, **{**sources, "members": str(moved)})
    second = ingest_records(settings, RunContext(tmp_path / "run2"))
    read, clean, quarantined = counts(second)["members"]
    assert (read, clean + quarantined) == (60, 60)
    raw = table(settings, "SELECT _source, count(*) AS n FROM raw_members GROUP BY ALL").rows()
    assert raw == [(str(moved), read)]
    stored = table(
        settings,
        "SELECT (SELECT count(*) FROM members) AS clean, (SELECT count(*) FROM quarantine "
        "WHERE table_name = 'members') AS quarantined, (SELECT count(*) FROM quarantine "
        f"WHERE source = '{sources['members']}') AS old_quarantined",
    ).row(0)
    assert stored == (clean, quarantined, 0)

    before = stored_state(settings)
    rerun = ingest_records(settings, RunContext(tmp_path / "run3"))
    assert counts(rerun) == counts(second)
    assert stored_state(settings) == before


def test_a_table_that_fails_a_blocking_expectation_is_not_written(tmp_path: Path) -> None:
    members = pl.read_csv(io.BytesIO(bundle_head("members.csv.gz", 20)), infer_schema=False)
    every_row_invalid = members.with_columns(age=pl.lit("250")).write_csv().encode()
    settings = settings_for(tmp_path, **write_sources(tmp_path, every_row_invalid))
    with pytest.raises(PipelineError) as refused:
        ingest_records(settings, RunContext(tmp_path / "run"))
    assert str(refused.value).startswith(
        f"{tmp_path / 'members.csv'}: the members table it gives fails "
        "expect_table_row_count_to_be_between(table); nothing written"
    )
    assert not settings.paths.warehouse.exists()


def test_huge_numbers_are_quarantined_with_their_reason_and_the_rest_loads(
    tmp_path: Path,
) -> None:
    expeditions = pl.read_csv(io.BytesIO(bundle_head("expeditions.csv", 30)), infer_schema=False)
    huge = {3: ("totmembers", "3000000000"), 5: ("camps", "1e30"), 7: ("smtmembers", "9" * 20)}
    for row, (column, value) in huge.items():
        expeditions[row - 1, column] = value
    members = pl.read_csv(io.BytesIO(bundle_head("members.csv.gz", 40)), infer_schema=False)
    members[2 - 1, "highpoint_metres"] = "1e30"
    sources = write_sources(
        tmp_path, members.write_csv().encode(), expeditions.write_csv().encode()
    )
    settings = settings_for(tmp_path, **sources)
    report = ingest_records(settings, RunContext(tmp_path / "run"))
    assert counts(report)["expeditions"] == (30, 27, 3)
    assert counts(report)["members"] == (40, 39, 1)
    reasons = table(
        settings, "SELECT table_name, row_number, reason FROM quarantine ORDER BY ALL"
    ).rows()
    assert reasons == [
        ("expeditions", 3, "totmembers = 3000000000: in_range(0, 999)"),
        ("expeditions", 5, "camps = '1e30': integer out of range"),
        ("expeditions", 7, f"smtmembers = '{'9' * 20}': integer out of range"),
        ("members", 2, "highpoint_metres = '1e30': integer out of range"),
    ]
    assert table(settings, "SELECT max(totmembers) AS m FROM expeditions")["m"][0] < 1000


def _ingest_in_child(overrides: dict[str, Any], run_dir: str) -> None:
    """A whole ingest in its own process (a multiprocessing target)."""
    ingest_records(load_settings(overrides=overrides), RunContext(Path(run_dir)))


def test_two_ingests_at_once_finish_one_after_the_other(tmp_path: Path) -> None:
    sources = write_sources(tmp_path, bundle_head("members.csv.gz", 100))
    overrides = overrides_for(tmp_path, **sources)
    settings = load_settings(overrides=overrides)
    run_dirs = [tmp_path / "run1", tmp_path / "run2"]
    spawn = multiprocessing.get_context("spawn")
    children = [
        spawn.Process(target=_ingest_in_child, args=(overrides, str(run_dir)))
        for run_dir in run_dirs
    ]
    # This process holds the warehouse while both children validate their sources, so both
    # reach the write while it is locked: each must wait, for this process or for the other.
    with warehouse.connect(settings.paths.warehouse):
        for child in children:
            child.start()
        # Each child writes its expectation results just before it opens the warehouse.
        deadline = time.monotonic() + 300
        while not all((d / "expectations" / "members.json").exists() for d in run_dirs):
            assert all(child.is_alive() for child in children), "a child stopped early"
            assert time.monotonic() < deadline, "the children never reached the write"
            time.sleep(0.1)
        time.sleep(0.5)  # both are now polling for the lock
    for child in children:
        child.join(timeout=300)
    assert [child.exitcode for child in children] == [0, 0]
    stored = table(
        settings,
        "SELECT (SELECT count(*) FROM members) + (SELECT count(*) FROM quarantine "
        "WHERE table_name = 'members') AS accounted, (SELECT count(*) FROM raw_members) AS raw",
    ).row(0)
    assert stored == (100, 100)
