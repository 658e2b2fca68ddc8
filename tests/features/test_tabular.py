"""Tabular features: from earlier seasons only, no outcome column, the documented rules."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb
import polars as pl
import pytest
from features_tables import create_contract_tables, expedition, insert, member, peak
from polars.testing import assert_frame_equal

from deepsummit.core.errors import PipelineError
from deepsummit.core.inputs import INPUTS_BY_NAME, OUTCOME_COLUMNS, Known
from deepsummit.features.tabular import (
    ATTEMPT_INPUT_SCHEMA,
    TABULAR_FEATURES,
    attempt_features,
    build_history,
)

pytest_plugins = ["features_fixtures"]

K = 20.0  # prior strength


def planned(expid: str, number: int, year: int, season: str = "Spring", **values) -> dict:
    """A planned attempt: the attempt input columns only (no outcome)."""
    recorded = expedition(expid, year) | member(expid, number, year)
    recorded["o2_planned"] = recorded["o2used"]  # the expedition's plan, as trained
    row = {name: value for name, value in recorded.items() if name in ATTEMPT_INPUT_SCHEMA}
    return row | {"expid": expid, "season": season, "climber_id": None} | values


def frame(rows: list[dict]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=ATTEMPT_INPUT_SCHEMA)


@pytest.fixture
def history(tmp_path: Path) -> duckdb.DuckDBPyConnection:
    """PEAK, seasons 2008 Spring/Autumn and 2009 Winter before the 2009 Spring attempts."""
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    create_contract_tables(con)
    insert(con, "peaks", [peak("PEAK", heightm=8500, himal="12")])
    expeditions = [
        expedition("S08", 2008, season="Spring", route1="R"),
        expedition("A08", 2008, season="Autumn", route1="R2"),
        expedition("W09", 2009, season="Winter", route1="R"),
        expedition("E09", 2009, season="Spring", route1="R"),  # the attempt's own season
        expedition("C09", 2009, season="Spring", route1="R"),  # concurrent: must not count
        expedition("F09", 2009, season="Autumn", route1="R"),  # later: must not count
    ]
    insert(con, "expeditions", expeditions)
    rows = [
        *[member("S08", n, 2008, success=n == 1) for n in (1, 2, 3, 4)],
        *[member("A08", n, 2008, season="Autumn", success=True) for n in (1, 2)],
        member("W09", 1, 2009, season="Winter", success=True),
        member("E09", 1, 2009, success=False),
        *[member("C09", n, 2009, success=True) for n in (1, 2, 3)],
        *[member("F09", n, 2009, season="Autumn", success=True) for n in (1, 2)],
    ]
    # climber C1: summited in 2008 Spring (8000 m), failed in 2008 Autumn (7000 m)
    rows[0]["climber_id"] = "C1"
    rows[4] |= {"climber_id": "C1", "success": False, "highpoint_metres": 7000}
    rows[8]["climber_id"] = "C1"  # concurrent expedition in the attempt's own season
    insert(con, "members", rows)
    build_history(con)
    yield con
    con.close()


def test_success_rates_count_earlier_seasons_only_smoothed_toward_the_prior(history) -> None:
    features = attempt_features(history, frame([planned("E09", 1, 2009, route1="R")]), K)
    # earlier seasons: S08 (4 members, 1 summit), A08 (2, 1): 2 of 6. W09 is Winter 2009,
    # December 2009 into 2010: after Spring 2009, so it must not count.
    prior = 2 / 6
    row = features.row(0, named=True)
    assert row["peak_success_rate"] == pytest.approx((2 + K * prior) / (6 + K))
    # route R: S08 only: 1 of 4
    assert row["route_success_rate"] == pytest.approx((1 + K * prior) / (4 + K))
    other_route = attempt_features(history, frame([planned("E09", 1, 2009, route1="NEW")]), K)
    assert other_route["route_success_rate"][0] == pytest.approx(prior)  # no history: the prior
    first = attempt_features(history, frame([planned("X", 1, 2008, season="Spring")]), K)
    assert first["peak_success_rate"][0] is None  # nothing earlier at all: missing


def test_a_rare_peak_leans_on_its_height_band_and_its_routes_on_the_peak(tmp_path) -> None:
    """RARE (6,100 m, 2 members) sits in the 6000–6499 m band with BUSY (6,400 m, 40 members,
    30 summits); HIGH (8,100 m) is in another band. A rate is shrunk one level up each time."""
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    create_contract_tables(con)
    peaks = [peak("RARE", heightm=6100), peak("BUSY", heightm=6400), peak("HIGH", heightm=8100)]
    insert(con, "peaks", peaks)
    climbs = {"RARE": (2, 0), "BUSY": (40, 30), "HIGH": (10, 1)}  # members, summits
    insert(con, "expeditions", [expedition(p, 2008, peakid=p, route1="R") for p in climbs])
    insert(
        con,
        "members",
        [
            member(p, n, 2008, peakid=p, success=n <= summits)
            for p, (members, summits) in climbs.items()
            for n in range(1, members + 1)
        ],
    )
    build_history(con)
    attempt = planned("RARE", 1, 2009, peakid="RARE", route1="R")
    row = attempt_features(con, frame([attempt, attempt | {"route1": "NEW"}]), K).rows(named=True)
    con.close()

    overall = 31 / 52
    band = (30 + K * overall) / (42 + K)  # RARE and BUSY
    rare = (0 + K * band) / (2 + K)
    assert row[0]["height_band"] == "6000–6499 m"
    assert row[0]["peak_success_rate"] == pytest.approx(rare)
    assert row[0]["route_success_rate"] == pytest.approx((0 + K * rare) / (2 + K))
    assert row[1]["route_success_rate"] == pytest.approx(rare)  # a new route: its peak's rate
    assert rare > 0.6  # not its own 0 of 2


def test_winter_comes_after_autumn_of_its_year(history) -> None:
    """Winter of 2009 (December 2009 into 2010) counts for Spring 2010, not for Autumn 2009."""
    autumn = attempt_features(history, frame([planned("F", 1, 2009, season="Autumn")]), K)
    spring = attempt_features(history, frame([planned("G", 1, 2010, season="Spring")]), K)
    # Autumn 2009 sees 2008 and Spring 2009 (S08 4/1, A08 2/1, E09 1/0, C09 3/3): 5 of 10.
    assert autumn["peak_success_rate"][0] == pytest.approx((5 + K * 0.5) / (10 + K))
    # Spring 2010 also sees Autumn 2009 (F09 2/2) and Winter 2009 (W09 1/1): 8 of 13.
    prior = 8 / 13
    assert spring["peak_success_rate"][0] == pytest.approx((8 + K * prior) / (13 + K))


def test_climber_experience_from_earlier_seasons_and_missing_without_an_id(history) -> None:
    rows = [
        planned("E09", 1, 2009, climber_id="C1"),
        planned("E09", 2, 2009, climber_id="NEWCOMER"),
        planned("E09", 3, 2009),
    ]
    features = attempt_features(history, frame(rows), K).sort("member_id")
    experience = features.select("prior_expeditions", "prior_summits", "highest_prev_altitude_m")
    assert experience.rows() == [(2.0, 1.0, 8000.0), (0.0, 0.0, None), (None, None, None)]


def test_member_attributes_follow_the_documented_rules(history) -> None:
    rows = [
        planned("E09", 1, 2009, sex="F", hired=True, citizenship="Nepal"),
        planned("E09", 2, 2009, sex=None, hired=True, citizenship="India/Nepal"),
        planned("E09", 3, 2009, hired=True, citizenship="France", oxygen_used=False),
        planned(
            "E09", 4, 2009, hired=False, citizenship="Nepal", commercial=True, o2_planned=False
        ),
        planned("E09", 5, 2009, hired=True, citizenship=None),
    ]
    features = attempt_features(history, frame(rows), K).sort("member_id")
    columns = ["sex", "is_hired", "is_sherpa", "oxygen_planned", "is_commercial", "o2_available"]
    # Both oxygen tokens carry the expedition's plan: member 3's own (post-climb) oxygen use
    # changes neither; it shows only in the retrospective reference column.
    assert features.select(columns).rows() == [
        (0, 1, 1, 1, 0, 1),
        (None, 1, 1, 1, 0, 1),
        (1, 1, 0, 1, 0, 1),
        (1, 0, 0, 0, 1, 0),
        (1, 1, None, 1, 0, 1),
    ]
    assert features["oxygen_used"].to_list() == [1, 1, 0, 1, 1]
    first = features.row(0, named=True)
    assert (first["heightm"], first["himal"], first["nationality"], first["peakid"]) == (
        8500.0,
        "12",
        "Nepal",
        "PEAK",
    )


def test_no_outcome_column_reaches_the_features(history) -> None:
    # The one outcome among the inputs is the retrospective reference, declared as such.
    assert OUTCOME_COLUMNS & set(TABULAR_FEATURES) == {"oxygen_used"}
    assert OUTCOME_COLUMNS & set(ATTEMPT_INPUT_SCHEMA) == {"oxygen_used"}
    assert INPUTS_BY_NAME["oxygen_used"].known is Known.AFTER_CLIMB
    attempt = frame([planned("E09", 1, 2009)])
    summited = attempt.with_columns(success=True, smtmembers=9, highpoint_metres=8848)
    failed = attempt.with_columns(success=False, smtmembers=0, highpoint_metres=5000)
    decision = [name for name in TABULAR_FEATURES if name not in OUTCOME_COLUMNS]
    a = attempt_features(history, summited, K).select(decision)
    b = attempt_features(history, failed, K).select(decision)
    assert_frame_equal(a, b)


def test_a_missing_input_column_is_one_clear_error(history) -> None:
    with pytest.raises(PipelineError, match=r"lack column.*climber_id"):
        attempt_features(history, frame([planned("E09", 1, 2009)]).drop("climber_id"), K)


def test_changing_later_outcomes_moves_no_earlier_feature(bundle_copy: Path) -> None:
    """Flip every outcome from 2005 Autumn on: no attempt up to and including that season
    changes (its own season never counts), while later attempts do (the test can fail)."""
    con = duckdb.connect(str(bundle_copy))
    attempts = con.sql(
        "SELECT e.*, m.* EXCLUDE (expedition_id, peakid, year, season, success, source), "
        "e.o2used AS o2_planned, d.trekking_agency AS agency, d.hired_staff, d.basecamp_date "
        "FROM members m JOIN expeditions e ON e.expid = m.expedition_id AND e.year = m.year "
        "LEFT JOIN expedition_details d ON d.expid = e.expid AND d.year = e.year "
        "WHERE e.peakid IN ('EVER', 'CHOY', 'AMAD') AND m.year >= 2003"
    ).pl()
    build_history(con)
    before = attempt_features(con, attempts, K)
    con.execute(
        "UPDATE members SET success = NOT success, highpoint_metres = 1000 "
        "WHERE year > 2005 OR (year = 2005 AND season IN ('Autumn', 'Winter'))"
    )
    build_history(con)
    after = attempt_features(con, attempts, K)
    con.close()
    up_to = (pl.col("year") < 2005) | ((pl.col("year") == 2005) & (pl.col("season") != "Winter"))
    assert before.filter(up_to).height > 1000
    assert_frame_equal(before.filter(up_to), after.filter(up_to))
    assert not before.filter(~up_to).equals(after.filter(~up_to))


def test_the_calendar_inputs_place_the_push_day_in_the_year_and_in_its_season(history) -> None:
    rows = [
        planned("E09", 1, 2009, season="Spring", smtdate=dt.date(2009, 5, 20)),
        planned("E09", 2, 2009, season="Spring", smtdate=dt.date(2009, 2, 25)),  # before it opens
        planned("W", 1, 2009, season="Winter", smtdate=dt.date(2010, 1, 15)),  # into the next year
        planned("A", 1, 2012, season="Autumn", smtdate=dt.date(2012, 12, 31)),  # a leap year
    ]
    features = attempt_features(history, frame(rows), K).sort("expid", "member_id")
    assert features.select("expid", "day_of_year", "days_in_season").rows() == [
        ("A", 366.0, 121.0),  # 1 September → 31 December
        ("E09", 140.0, 80.0),  # 1 March → 20 May
        ("E09", 56.0, -4.0),
        ("W", 15.0, 45.0),  # 1 December 2009 → 15 January 2010
    ]


def test_rates_count_climbing_members_and_the_members_expedition_records_count(
    tmp_path: Path,
) -> None:
    """Hired staff do not count in a success rate (an expedition record counts none); an
    expedition without member rows counts its climbing members."""
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    create_contract_tables(con)
    insert(con, "peaks", [peak("PEAK")])
    insert(
        con,
        "expeditions",
        [
            expedition("M08", 2008),  # member rows: 2 climbers (1 summits), 2 hired (both)
            expedition("X08", 2008, totmembers=4, smtmembers=3),  # no member rows
        ],
    )
    insert(
        con,
        "members",
        [
            member("M08", 1, 2008, success=True),
            member("M08", 2, 2008, success=False),
            *[member("M08", n, 2008, hired=True, success=True) for n in (3, 4)],
        ],
    )
    build_history(con)
    features = attempt_features(con, frame([planned("NEXT", 1, 2009)]), K)
    con.close()
    prior = (1 + 3) / (2 + 4)  # climbing members only: M08's 1 of 2 and X08's 3 of 4
    assert features["peak_success_rate"][0] == pytest.approx((4 + K * prior) / (6 + K))
