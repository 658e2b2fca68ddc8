"""Tabular features: from earlier seasons only, no outcome column, the documented rules."""

from __future__ import annotations

from pathlib import Path

import duckdb
import polars as pl
import pytest
from features_tables import create_contract_tables, expedition, insert, member, peak
from polars.testing import assert_frame_equal

from pipeline.errors import PipelineError
from pipeline.features.spec import OUTCOME_COLUMNS, TABULAR_TOKENS
from pipeline.features.tabular import ATTEMPT_INPUT_SCHEMA, TABULAR_FEATURES, attempt_features

pytest_plugins = ["features_fixtures"]

K = 20.0  # prior strength


def planned(expid: str, number: int, year: int, season: str = "Spring", **values) -> dict:
    """A planned attempt: the attempt input columns only (no outcome)."""
    row = {
        name: value
        for name, value in (expedition(expid, year) | member(expid, number, year)).items()
        if name in ATTEMPT_INPUT_SCHEMA
    }
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
    yield con
    con.close()


def test_success_rates_count_earlier_seasons_only_smoothed_toward_the_prior(history) -> None:
    features = attempt_features(history, frame([planned("E09", 1, 2009, route1="R")]), "archive", K)
    # earlier seasons: S08 (4 members, 1 summit), A08 (2, 1), W09 (1, 1): 3 of 7
    prior = 3 / 7
    row = features.row(0, named=True)
    assert row["peak_success_rate"] == pytest.approx((3 + K * prior) / (7 + K))
    # route R: S08 and W09 (Winter comes before Spring in a year): 2 of 5
    assert row["route_success_rate"] == pytest.approx((2 + K * prior) / (5 + K))
    other_route = attempt_features(
        history, frame([planned("E09", 1, 2009, route1="NEW")]), "archive", K
    )
    assert other_route["route_success_rate"][0] == pytest.approx(prior)  # no history: the prior
    first = attempt_features(history, frame([planned("X", 1, 2008, season="Spring")]), "archive", K)
    assert first["peak_success_rate"][0] is None  # nothing earlier at all: missing


def test_climber_experience_from_earlier_seasons_and_missing_without_an_id(history) -> None:
    rows = [
        planned("E09", 1, 2009, climber_id="C1"),
        planned("E09", 2, 2009, climber_id="NEWCOMER"),
        planned("E09", 3, 2009),
    ]
    features = attempt_features(history, frame(rows), "archive", K).sort("member_id")
    experience = features.select("prior_expeditions", "prior_summits", "highest_prev_altitude_m")
    assert experience.rows() == [(2.0, 1.0, 8000.0), (0.0, 0.0, None), (None, None, None)]


def test_member_attributes_follow_the_documented_rules(history) -> None:
    rows = [
        planned("E09", 1, 2009, sex="F", hired=True, citizenship="Nepal"),
        planned("E09", 2, 2009, sex=None, hired=True, citizenship="India/Nepal"),
        planned("E09", 3, 2009, hired=True, citizenship="France", oxygen_used=False),
        planned("E09", 4, 2009, hired=False, citizenship="Nepal", commercial=True, o2used=False),
        planned("E09", 5, 2009, hired=True, citizenship=None),
    ]
    features = attempt_features(history, frame(rows), "archive", K).sort("member_id")
    columns = ["sex", "is_hired", "is_sherpa", "oxygen_planned", "is_commercial", "o2_available"]
    assert features.select(columns).rows() == [
        (0, 1, 1, 1, 0, 1),
        (None, 1, 1, 1, 0, 1),
        (1, 1, 0, 0, 0, 1),
        (1, 0, 0, 1, 1, 0),
        (1, 1, None, 1, 0, 1),
    ]
    first = features.row(0, named=True)
    assert (first["heightm"], first["himal"], first["nationality"], first["peakid"]) == (
        8500.0,
        "12",
        "Nepal",
        "PEAK",
    )


def test_no_outcome_column_reaches_the_features(history) -> None:
    assert len(TABULAR_FEATURES) == TABULAR_TOKENS
    assert not OUTCOME_COLUMNS & set(TABULAR_FEATURES)
    assert not OUTCOME_COLUMNS & set(ATTEMPT_INPUT_SCHEMA)
    attempt = frame([planned("E09", 1, 2009)])
    summited = attempt.with_columns(success=True, smtmembers=9, highpoint_metres=8848)
    failed = attempt.with_columns(success=False, smtmembers=0, highpoint_metres=5000)
    a = attempt_features(history, summited, "archive", K)
    b = attempt_features(history, failed, "archive", K)
    assert_frame_equal(a, b)
    assert not OUTCOME_COLUMNS & set(a.columns)


def test_a_missing_input_column_is_one_clear_error(history) -> None:
    with pytest.raises(PipelineError, match=r"lack column.*climber_id"):
        attempt_features(history, frame([planned("E09", 1, 2009)]).drop("climber_id"), "x", K)


def test_changing_later_outcomes_moves_no_earlier_feature(bundle_copy: Path) -> None:
    """Flip every outcome from 2005 Autumn on: no attempt up to and including that season
    changes (its own season never counts), while later attempts do (the test can fail)."""
    con = duckdb.connect(str(bundle_copy))
    attempts = con.sql(
        "SELECT e.*, m.* EXCLUDE (expedition_id, peakid, year, season, success, source) "
        "FROM members m JOIN expeditions e ON e.expid = m.expedition_id "
        "AND e.year = m.year WHERE e.peakid IN ('EVER', 'CHOY', 'AMAD') AND m.year >= 2003"
    ).pl()
    before = attempt_features(con, attempts, "archive", K)
    con.execute(
        "UPDATE members SET success = NOT success, highpoint_metres = 1000 "
        "WHERE year > 2005 OR (year = 2005 AND season = 'Autumn')"
    )
    after = attempt_features(con, attempts, "archive", K)
    con.close()
    up_to = pl.col("year") <= 2005  # Autumn is the last season of a year
    assert before.filter(up_to).height > 1000
    assert_frame_equal(before.filter(up_to), after.filter(up_to))
    assert not before.filter(~up_to).equals(after.filter(~up_to))
