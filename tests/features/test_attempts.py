"""Attempts: every record with an outcome (a member row, or a climbing member an expedition
without member rows counts) becomes an attempt or is counted under one reason."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb
import pytest
from features_tables import (
    create_contract_tables,
    expedition,
    insert,
    member,
    peak,
    settings_for,
    weather_days,
)

from deepsummit.core.inputs import WEATHER_TOKENS
from deepsummit.features.attempts import (
    EXCLUSION_REASONS,
    build_attempts,
    exclusion_counts,
    newest_dated_year,
)
from deepsummit.features.tabular import build_history

pytest_plugins = ["features_fixtures"]

SPLIT = {"train_until": 2009, "validation_until": 2010, "test_until": 2011}


@pytest.fixture
def world(tmp_path: Path) -> Path:
    """One expedition per way of (not) becoming an attempt; the weather of PEAK starts in 2009."""
    path = tmp_path / "w.duckdb"
    con = duckdb.connect(str(path))
    create_contract_tables(con)
    insert(con, "peaks", [peak("PEAK"), peak("DRY")])
    gap = {dt.date(2011, 5, 1), dt.date(2011, 5, 2)}
    days = weather_days("PEAK", dt.date(2009, 1, 1), dt.date(2012, 12, 31))
    insert(con, "weather_daily", [row for row in days if row["date"] not in gap])
    insert(
        con,
        "expeditions",
        [
            expedition("E1", 2010),  # an attempt for both members
            expedition("E1", 1910, smtdate=None),  # same id a century earlier: no date
            expedition("E2", 2010, smtdate=None),
            expedition("E3", 2010, peakid="GHOST"),  # not in peaks
            expedition("E4", 2010, peakid="DRY"),  # no weather for this peak
            expedition("E5", 2011),  # 2 days missing in its 90-day window
            expedition("E6", 2012),  # after the last split year
            expedition("E0", 2005),  # before the weather source's first day: weather absent
            # No member rows: its 3 climbing members are attempts, the first 2 summiting.
            expedition("X1", 2011, totmembers=3, smtmembers=2, smtdate=dt.date(2011, 4, 20)),
            expedition("X2", 2011, totmembers=2, smtmembers=0, smtdate=None),  # no date
            expedition("X3", 2011, totmembers=0, smtmembers=0),  # counts nobody
        ],
    )
    insert(
        con,
        "members",
        [
            member("E1", 1, 2010),
            member("E1", 2, 2010),
            member("E1", 1, 1910),
            member("E2", 1, 2010),
            member("E3", 1, 2010),
            member("E4", 1, 2010),
            *[member("E5", n, 2011) for n in (1, 2, 3)],
            member("E6", 1, 2012),
            member("E0", 1, 2005),
            member("NOEXP", 1, 2010),  # no such expedition
        ],
    )
    con.close()
    return path


def _build(tmp_path: Path, warehouse: Path, **features: object) -> tuple[list[str], dict, int]:
    settings = settings_for(tmp_path, warehouse, split=SPLIT, **features)
    con = duckdb.connect(str(warehouse))
    try:
        build_history(con)
        build_attempts(con, settings.features, settings.weather.source, SPLIT["test_until"])
        attempts = sorted(r[0] for r in con.execute("SELECT member_id FROM attempts").fetchall())
        windows = con.execute("SELECT count(*) FROM weather_windows").fetchall()[0][0]
        return attempts, exclusion_counts(con), windows
    finally:
        con.close()


def test_every_record_is_an_attempt_or_counted_under_its_first_reason(
    world: Path, tmp_path: Path
) -> None:
    attempts, excluded, windows = _build(tmp_path, world)
    # E4 is on a peak without weather, E0 before the source's first day: attempts all the same,
    # their weather absent. X1 counts 3 climbing members.
    assert attempts == [
        "E0-01", "E1-01", "E1-02", "E4-01", "X1-climber01", "X1-climber02", "X1-climber03",
    ]  # fmt: skip
    assert excluded == {
        "no expedition match": 1,
        "no date": 2 + 2,  # E1 of 1910 and E2; X2's two climbing members
        "unknown peak": 1,
        "window incomplete": 3,
        "after the test years": 1,
    }
    assert list(excluded) == [r for r in EXCLUSION_REASONS if r in excluded]
    # 12 member rows + 5 climbing members the expedition records without member rows count
    assert len(attempts) + sum(excluded.values()) == 12 + 5
    # one window per (peak, date) however many members share it: E0, E1, E4, E5, E6 and X1
    assert windows == 6 * WEATHER_TOKENS


def test_an_expedition_without_member_rows_counts_its_climbing_members(
    world: Path, tmp_path: Path
) -> None:
    """Its members are what the record says: totmembers of them, smtmembers summiting, not
    hired (the count leaves hired staff out); who they were is missing, never invented."""
    _build(tmp_path, world)
    with duckdb.connect(str(world), read_only=True) as con:
        rows = con.execute(
            "SELECT record, label, hired, sex, age, citizenship, expedition_role, climber_id "
            "FROM attempts WHERE expid = 'X1' ORDER BY member_id"
        ).fetchall()
        records = dict(
            con.execute("SELECT record, count(*) FROM attempt_exclusions GROUP BY ALL").fetchall()
        )
    assert rows == [
        ("expedition", True, False, None, None, None, None, None),
        ("expedition", True, False, None, None, None, None, None),
        ("expedition", False, False, None, None, None, None, None),
    ]
    assert records == {"member": 5, "expedition": 1}  # X2's two, under "no date"


def test_a_peak_without_weather_keeps_its_attempts_with_the_weather_absent(
    world: Path, tmp_path: Path
) -> None:
    _build(tmp_path, world)
    with duckdb.connect(str(world), read_only=True) as con:
        flags = dict(con.execute("SELECT expid, has_weather FROM attempts").fetchall())
        absent = con.execute(
            "SELECT DISTINCT missing_days FROM weather_windows WHERE peakid = 'DRY'"
        ).fetchall()
        values = con.execute(
            "SELECT count(*) FROM weather_windows WHERE peakid = 'DRY' "
            "AND temperature_2m_mean IS NOT NULL"
        ).fetchall()
    assert flags == {"E0": False, "E1": True, "E4": False, "X1": True}
    assert absent == [(90,)]  # every day of its window missing: never a borrowed series
    assert values == [(0,)]


def test_max_missing_days_lets_a_gappy_window_through(world: Path, tmp_path: Path) -> None:
    attempts, excluded, _ = _build(tmp_path, world, max_missing_days=2)
    assert [a for a in attempts if a.startswith("E5")] == ["E5-01", "E5-02", "E5-03"]
    assert "window incomplete" not in excluded


def test_a_rebuild_replaces_and_never_duplicates(world: Path, tmp_path: Path) -> None:
    assert _build(tmp_path, world) == _build(tmp_path, world)


def test_bundle_attempts_match_the_data_readme(bundle_copy: Path, tmp_path: Path) -> None:
    settings = settings_for(tmp_path, bundle_copy)
    con = duckdb.connect(str(bundle_copy))
    build_history(con)
    newest = newest_dated_year(con)
    build_attempts(con, settings.features, settings.weather.source, newest)
    counts = dict(
        ((record, weather), (rows, peaks))
        for record, weather, rows, peaks in con.execute(
            "SELECT record, has_weather, count(*), count(DISTINCT peakid) FROM attempts "
            "GROUP BY ALL"
        ).fetchall()
    )
    windows, complete = con.execute(
        "SELECT count(DISTINCT (peakid, date)), "
        "count(DISTINCT (peakid, date)) FILTER (WHERE missing_days = 0) FROM weather_windows "
        "WHERE peakid IN (SELECT peakid FROM weather_daily) AND (peakid, date) IN "
        "(SELECT (peakid, smtdate) FROM attempt_candidates WHERE record = 'member')"
    ).fetchall()[0]
    by_record = dict(
        con.execute("SELECT record, sum(members) FROM attempt_exclusions GROUP BY ALL").fetchall()
    )
    excluded = exclusion_counts(con)
    con.close()
    # data/README.md section 6: 75,929 of 76,519 member rows match an expedition, 2,591 of them
    # without smtdate; 2,827 (peak, smtdate) pairs on the eight weather peaks, 2,783 with
    # complete windows; 44,463 member rows have weather on their expedition's smtdate. The
    # fixture leaves out, as the records stage quarantines them, 7 expeditions whose date lies
    # outside their season: 43 member rows, 4 of them (ANN115402, 2015) with weather.
    assert newest == 2025
    assert excluded["no expedition match"] == 76_519 - 75_929 + 43
    assert excluded["no date"] == 2_591 + by_record["expedition"] - excluded["window incomplete"]
    # Of the 7, EVER 1921, KANG 1929 (no day of weather) and ANN1 2016 (complete) on weather peaks.
    assert (windows, complete) == (2_827 - 3, 2_783 - 1)
    assert counts["member", True] == (44_463 - 4, 8)
    # On the 346 peaks without weather, and the 437 members of windows the archive has no day
    # of (before 1940, the gaps of EVER 1945-49 and MAKA 1990-94): their weather is absent.
    assert counts["member", False][0] == 28_411 + 437 - (43 - 4 - 27)
    # 1,139 expeditions of 2020-2025 and 244 earlier ones have no member rows: 10,838
    # climbing members counted, 10,074 of them with a date (data/README.md section 2).
    expedition_attempts = counts["expedition", True][0] + counts["expedition", False][0]
    assert expedition_attempts + by_record["expedition"] == 10_838
    assert counts["expedition", True][1] == 8  # 2019-2024 on the archive's peaks
    members = sum(rows for (record, _), (rows, _) in counts.items() if record == "member")
    assert members + by_record["member"] == 76_519
