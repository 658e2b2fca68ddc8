"""Validation rules: each with a bad row it catches, the good rows around it kept."""

from __future__ import annotations

import polars as pl
import pytest

from deepsummit.records.validation import MODELS, columns_of, validate_table

GOOD_MEMBER = {
    "expedition_id": "EVER19101",
    "member_id": "EVER19101-01",
    "peakid": "EVER",
    "year": "2019",
    "season": "Spring",
    "sex": "F",
    "age": "39",
    "citizenship": "Spain",
    "expedition_role": "Leader",
    "hired": "FALSE",
    "highpoint_metres": "8850",
    "success": "TRUE",
    "solo": "FALSE",
    "oxygen_used": "TRUE",
    "died": "FALSE",
    "death_cause": None,
    "death_height_metres": None,
    "injured": "FALSE",
    "injury_type": None,
    "injury_height_metres": None,
    "climber_id": None,
    "source": "test",
}
GOOD_EXPEDITION = {
    "expid": "EVER19101",
    "peakid": "EVER",
    "year": "2019",
    "season": "Spring",
    "route1": "S Col-SE Ridge",
    "totmembers": "3",
    "smtmembers": "2",
    "smtdate": "2019-05-23",
    "success": "True",
    "termreason": "1",
    "highpoint": "8850.0",
    "o2used": "True",
    "commercial": "False",
    "camps": "4.0",
    "style": None,
    "source": "test",
}
GOOD_PEAK = {
    "peakid": "EVER",
    "pkname": "Everest",
    "heightm": "8849",
    "himal": "12",
    "location": "Khumbu Himal",
    "latitude": "27.9881",
    "longitude": "86.9250",
    "coord_source": "published",
}


def frame(good: dict[str, str | None], *changes: dict[str, str | None]) -> pl.DataFrame:
    """Row 1 is the good row; each change dict gives one more row (good row with edits)."""
    rows = [good, *({**good, **change} for change in changes)]
    return (
        pl.DataFrame(rows, schema=dict.fromkeys(good, pl.String))
        .with_row_index("_row", offset=1)
        .with_columns(pl.col("_row").cast(pl.Int64))
    )


def reasons(table: str, good: dict, change: dict, known: list[str] | None = None) -> list[str]:
    split = validate_table(frame(good, change), table, known)
    assert split.clean["_row"].to_list() == [1], "the good row must stay clean"
    assert split.rejected["_row"].to_list() == [2]
    return split.rejected["reason"].to_list()


@pytest.mark.parametrize(
    ("age", "reason"),
    [
        ("0", "age = 0: in_range(1, 100)"),
        ("250", "age = 250: in_range(1, 100)"),
        ("abc", "age = 'abc': not an integer"),
        ("39.5", "age = '39.5': not an integer"),
    ],
)
def test_member_age_outside_1_to_100_or_not_a_number(age: str, reason: str) -> None:
    assert reasons("members", GOOD_MEMBER, {"member_id": "X-02", "age": age}) == [reason]


def test_missing_age_is_allowed() -> None:
    split = validate_table(frame(GOOD_MEMBER, {"member_id": "X-02", "age": None}), "members")
    assert split.rejected.is_empty() and split.clean["age"].to_list() == [39, None]


def test_impossible_calendar_date() -> None:
    change = {"expid": "EVER19102", "smtdate": "2019-02-30"}
    assert reasons("expeditions", GOOD_EXPEDITION, change) == [
        "smtdate = '2019-02-30': not a calendar date"
    ]


@pytest.mark.parametrize(
    ("season", "smtdate", "inside"),
    [
        ("Spring", "2017-05-01", False),  # another year
        ("Spring", "2019-06-25", True),  # a month's slack after the season's three
        ("Spring", "2019-09-24", False),  # the 1921 Everest reconnaissance's kind of record
        ("Autumn", "2019-05-20", False),
        ("Winter", "2020-01-16", True),  # Winter 2019 runs from December into 2020
        ("Winter", "2019-01-16", False),  # before Winter 2019 opened
        ("Winter", "2020-12-14", False),  # a year late
    ],
)
def test_summit_date_outside_its_season(season: str, smtdate: str, inside: bool) -> None:
    change = {"expid": "EVER19102", "season": season, "smtdate": smtdate}
    if inside:
        split = validate_table(frame(GOOD_EXPEDITION, change), "expeditions")
        assert split.clean["_row"].to_list() == [1, 2]
    else:
        found = reasons("expeditions", GOOD_EXPEDITION, change)
        assert found[0].startswith("smtdate outside its season")


def test_more_summiters_than_climbing_members() -> None:
    change = {"expid": "EVER19102", "totmembers": "3", "smtmembers": "4"}
    assert reasons("expeditions", GOOD_EXPEDITION, change) == [
        "smtmembers > totmembers: more summiters than climbing members"
    ]


def test_unknown_peak_id_when_peaks_are_known() -> None:
    change = {"member_id": "X-02", "peakid": "NOPE"}
    assert reasons("members", GOOD_MEMBER, change, known=["EVER"]) == [
        "peakid = NOPE: unknown peak id (not in peaks)"
    ]


def test_duplicated_key_keeps_the_first_row() -> None:
    # Same (member_id, year) twice: the first stays, the second is quarantined.
    assert reasons("members", GOOD_MEMBER, {"age": "40"}) == [
        "duplicate key (member_id, year): the first row is kept"
    ]


def test_same_id_in_another_century_is_not_a_duplicate() -> None:
    split = validate_table(
        frame(GOOD_EXPEDITION, {"year": "1919", "smtdate": "1919-05-23"}), "expeditions"
    )
    assert split.clean.height == 2 and split.rejected.is_empty()


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"season": "Unknown"}, "season = Unknown: isin("),
        ({"year": "1899"}, "year = 1899: in_range(1900, "),
        ({"highpoint_metres": "8851"}, "highpoint_metres = 8851: in_range(0, 8850)"),
        ({"sex": "X"}, "sex = X: isin("),
        ({"success": "maybe"}, "success = 'maybe': not a boolean"),
        ({"success": None}, "success = null: not_nullable"),
    ],
)
def test_member_value_rules(change: dict[str, str | None], reason: str) -> None:
    found = reasons("members", GOOD_MEMBER, {"member_id": "X-02", **change})
    assert found[0].startswith(reason)


def test_several_problems_of_one_row_are_reported_together() -> None:
    found = reasons("members", GOOD_MEMBER, {"member_id": "X-02", "age": "0", "sex": "X"})
    assert found == ["sex = X: isin(('M', 'F')); age = 0: in_range(1, 100)"] or (
        found == ["age = 0: in_range(1, 100); sex = X: isin(('M', 'F'))"]
    )


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"heightm": "9000"}, "heightm = 9000: in_range(0, 8849)"),
        ({"latitude": "35.0"}, "latitude = 35.0: in_range(26.3, 30.5)"),
        ({"longitude": "79.5"}, "longitude = 79.5: in_range(80.0, 88.3)"),
        ({"coord_source": "guessed"}, "coord_source = guessed: isin("),
        ({"latitude": None, "longitude": None}, "coordinates must be given exactly"),
        # Everest as the source geocoder placed it (Pokhara), labelled as published.
        ({"latitude": "28.2051", "longitude": "84.0102"}, "published coordinates more than 5 km"),
    ],
)
def test_peak_rules(change: dict[str, str | None], reason: str) -> None:
    split = validate_table(frame(GOOD_PEAK, {"peakid": "EVE2", **change}), "peaks")
    # EVE2 has no published reference: only the Everest-at-Pokhara row needs peakid EVER.
    if "published coordinates" in reason:
        split = validate_table(
            frame({**GOOD_PEAK, "peakid": "AMAD"}, {**GOOD_PEAK, **change}), "peaks"
        )
    assert split.clean.height == 1
    assert split.rejected["reason"][0].startswith(reason)


def test_geocoded_suspect_and_empty_peaks_are_kept() -> None:
    split = validate_table(
        frame(
            GOOD_PEAK,
            {"peakid": "BAUD", "coord_source": "geocoded-suspect", "latitude": "27.72"},
            {"peakid": "SANK", "coord_source": "empty", "latitude": None, "longitude": None},
        ),
        "peaks",
    )
    assert split.rejected.is_empty()
    assert split.clean["coord_source"].to_list() == ["published", "geocoded-suspect", "empty"]


def test_clean_rows_are_typed_as_the_warehouse_columns() -> None:
    split = validate_table(frame(GOOD_EXPEDITION), "expeditions")
    row = split.clean.row(0, named=True)
    assert (row["year"], row["highpoint"], row["camps"], row["success"]) == (2019, 8850, 4, True)
    assert str(row["smtdate"]) == "2019-05-23"
    assert list(split.clean.drop("_row").columns) == list(columns_of("expeditions"))


INTEGER_MAX = 2**31 - 1  # the warehouse's INTEGER columns


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"totmembers": "3000000000"}, "totmembers = 3000000000: in_range(0, 999)"),
        (
            {"totmembers": "1000", "smtmembers": "1000"},
            "totmembers = 1000: in_range(0, 999); smtmembers = 1000: in_range(0, 999)",
        ),
        ({"camps": "100"}, "camps = 100: in_range(0, 99)"),
        ({"camps": "1e30"}, "camps = '1e30': integer out of range"),
        ({"highpoint": "-1e300"}, "highpoint = '-1e300': integer out of range"),
        ({"year": "9" * 25}, f"year = '{'9' * 25}': integer out of range"),
    ],
)
def test_a_huge_integer_costs_its_row_only(change: dict[str, str], reason: str) -> None:
    assert reasons("expeditions", GOOD_EXPEDITION, {"expid": "EVER19102", **change}) == [reason]


def test_every_integer_column_has_an_upper_bound_the_warehouse_can_store() -> None:
    for table, model in MODELS.items():
        for name, column in model.to_schema().columns.items():
            if column.dtype.type != pl.Int64:
                continue
            bounds = [c.statistics for c in column.checks if c.name == "in_range"]
            assert bounds, f"{table}.{name} has no range"
            assert 0 <= bounds[0]["max_value"] <= INTEGER_MAX, f"{table}.{name}"


GOOD_EXPEDITION_DETAILS = {
    "expid": "EVER19101",
    "year": "2019",
    "peakid": "EVER",
    "season": "Spring",
    "basecamp_date": "2019-04-10",
    "highpoint_date": "2019-05-23",
    "termination_date": "2019-05-28",
    "termination_reason": "Success (main peak)",
    "highpoint_metres": "8850",
    "members": "3",
    "member_deaths": "0",
    "hired_staff": "4",
    "hired_staff_deaths": "0",
    "oxygen_used": "TRUE",
    "trekking_agency": "Seven Summit Treks",
    "source": "test",
}


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"basecamp_date": "2019-05-24"}, "basecamp_date after highpoint_date"),
        ({"season": "Monsoon"}, "season = Monsoon: isin("),
        ({"hired_staff": "-1"}, "hired_staff = -1: in_range("),
        ({"basecamp_date": "2019-04-31"}, "basecamp_date = '2019-04-31': not a calendar date"),
    ],
)
def test_expedition_details_rules(change: dict[str, str], reason: str) -> None:
    other = {"expid": "EVER19102", **change}  # another expedition: no duplicate key
    (found,) = reasons("expedition_details", GOOD_EXPEDITION_DETAILS, other)
    assert found.startswith(reason), found


def test_expedition_details_without_dates_are_kept() -> None:
    split = validate_table(
        frame(
            GOOD_EXPEDITION_DETAILS,
            {"expid": "EVER19102", "basecamp_date": None, "highpoint_date": None},
        ),
        "expedition_details",
    )
    assert split.rejected.is_empty() and split.clean.height == 2
