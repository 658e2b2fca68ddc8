"""Attempts: every member row becomes an attempt or is counted under one reason."""

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
from deepsummit.features.attempts import EXCLUSION_REASONS, build_attempts, exclusion_counts

pytest_plugins = ["features_fixtures"]

SPLIT = {"train_until": 2009, "validation_until": 2010, "test_until": 2011}


@pytest.fixture
def world(tmp_path: Path) -> Path:
    """One expedition per way of (not) becoming an attempt."""
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
            member("NOEXP", 1, 2010),  # no such expedition
        ],
    )
    con.close()
    return path


def _build(tmp_path: Path, warehouse: Path, **features: object) -> tuple[list[str], dict, int]:
    settings = settings_for(tmp_path, warehouse, split=SPLIT, **features)
    con = duckdb.connect(str(warehouse))
    try:
        build_attempts(con, settings.features, settings.weather.source)
        attempts = sorted(r[0] for r in con.execute("SELECT member_id FROM attempts").fetchall())
        windows = con.execute("SELECT count(*) FROM weather_windows").fetchall()[0][0]
        return attempts, exclusion_counts(con), windows
    finally:
        con.close()


def test_every_member_row_is_an_attempt_or_counted_under_its_first_reason(
    world: Path, tmp_path: Path
) -> None:
    attempts, excluded, windows = _build(tmp_path, world)
    # E4 is on a peak without weather: an attempt all the same, its weather absent
    assert attempts == ["E1-01", "E1-02", "E4-01"]
    assert excluded == {
        "no expedition match": 1,
        "no date": 2,
        "unknown peak": 1,
        "window incomplete": 3,
        "after the test years": 1,
    }
    assert list(excluded) == [r for r in EXCLUSION_REASONS if r in excluded]
    assert len(attempts) + sum(excluded.values()) == 11  # member rows
    # one window per (peak, date) however many members share it: E1, E4, E5 and E6
    assert windows == 4 * WEATHER_TOKENS


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
    assert flags == {"E1": True, "E4": False}
    assert absent == [(90,)]  # every day of its window missing: never a borrowed series
    assert values == [(0,)]


def test_max_missing_days_lets_a_gappy_window_through(world: Path, tmp_path: Path) -> None:
    attempts, excluded, _ = _build(tmp_path, world, max_missing_days=2)
    assert attempts == ["E1-01", "E1-02", "E4-01", "E5-01", "E5-02", "E5-03"]
    assert "window incomplete" not in excluded


def test_a_rebuild_replaces_and_never_duplicates(world: Path, tmp_path: Path) -> None:
    assert _build(tmp_path, world) == _build(tmp_path, world)


def test_bundle_attempts_match_the_data_readme(bundle_copy: Path, tmp_path: Path) -> None:
    settings = settings_for(tmp_path, bundle_copy)
    con = duckdb.connect(str(bundle_copy))
    build_attempts(con, settings.features, settings.weather.source)
    with_weather, without_weather, peaks_without = con.execute(
        "SELECT count(*) FILTER (WHERE has_weather), count(*) FILTER (WHERE NOT has_weather), "
        "count(DISTINCT peakid) FILTER (WHERE NOT has_weather) FROM attempts"
    ).fetchall()[0]
    windows, complete = con.execute(
        "SELECT count(DISTINCT (peakid, date)), "
        "count(DISTINCT (peakid, date)) FILTER (WHERE missing_days = 0) FROM weather_windows "
        "WHERE peakid IN (SELECT peakid FROM weather_daily)"
    ).fetchall()[0]
    excluded = exclusion_counts(con)
    con.close()
    # data/README.md section 6: 75,929 of 76,519 member rows match an expedition, 2,591 of them
    # without smtdate; 2,827 (peak, smtdate) pairs on the eight weather peaks, 2,783 with
    # complete windows; 44,463 member rows have weather on their expedition's smtdate. The
    # 28,411 member rows on the 346 other peaks with a date are attempts without weather.
    assert excluded["no expedition match"] == 76_519 - 75_929
    assert excluded["no date"] == 2_591
    assert (windows, complete) == (2_827, 2_783)
    assert with_weather == 44_463
    assert (without_weather, peaks_without) == (28_411, 346)
    assert with_weather + without_weather + sum(excluded.values()) == 76_519
