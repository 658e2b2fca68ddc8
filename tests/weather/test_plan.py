"""Grouping missing spans into Open-Meteo requests."""

from __future__ import annotations

from datetime import date, timedelta
from itertools import pairwise

import polars as pl

from deepsummit.core.config import load_settings
from deepsummit.core.inputs import WEATHER_VARIABLES
from deepsummit.weather.cost import weighted_calls
from deepsummit.weather.plan import plan_requests


def spans(*rows: tuple[str, date, date]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "peakid": [r[0] for r in rows],
            "start_date": [r[1] for r in rows],
            "end_date": [r[2] for r in rows],
            "latitude": [27.0 + i / 10 for i in range(len(rows))],
            "longitude": [86.0 + i / 10 for i in range(len(rows))],
            "heightm": [8000 + i for i in range(len(rows))],
        }
    )


def test_identical_spans_share_a_request_and_cost_the_same() -> None:
    config = load_settings().weather
    a, b = date(2019, 2, 20), date(2019, 5, 20)
    plan = plan_requests(spans(("EVER", a, b), ("LHOT", a, b), ("MAKA", a, b)), config)
    assert len(plan) == 1
    assert [loc.peakid for loc in plan[0].locations] == ["EVER", "LHOT", "MAKA"]
    assert plan[0].weight == weighted_calls(15, 90) * 3


def test_different_spans_stay_apart_unless_the_overhead_allows() -> None:
    rows = spans(
        ("EVER", date(2019, 2, 20), date(2019, 5, 23)),
        ("LHOT", date(2019, 2, 20), date(2019, 5, 20)),
    )
    assert len(plan_requests(rows, load_settings().weather)) == 2
    lenient = load_settings(overrides={"weather": {"max_merge_overhead": 0.05}}).weather
    merged = plan_requests(rows, lenient)
    assert len(merged) == 1 and merged[0].days == 93


def test_location_cap_and_one_span_per_peak_per_request() -> None:
    config = load_settings(overrides={"weather": {"max_locations_per_request": 2}}).weather
    a, b = date(2000, 1, 1), date(2000, 3, 30)
    plan = plan_requests(spans(("A", a, b), ("B", a, b), ("C", a, b)), config)
    assert [len(r.locations) for r in plan] == [2, 1]


def test_long_spans_are_split_to_fit_the_minute_budget() -> None:
    config = load_settings(overrides={"weather": {"limits": {"per_minute": 60}}}).weather
    plan = plan_requests(spans(("EVER", date(2000, 1, 1), date(2001, 12, 31))), config)
    assert sum(r.days for r in plan) == 731
    assert all(r.weight <= 30 for r in plan)
    assert all(b.start == a.end + timedelta(days=1) for a, b in pairwise(plan))
    assert plan[0].start == date(2000, 1, 1) and plan[-1].end == date(2001, 12, 31)


def test_params_ask_for_era5_in_local_days_at_the_peak_height() -> None:
    config = load_settings().weather
    (request,) = plan_requests(spans(("EVER", date(2019, 2, 20), date(2019, 5, 20))), config)
    params = request.params(config)
    assert params["models"] == "era5"
    assert params["timezone"] == "Asia/Kathmandu"
    assert params["elevation"] == "8000"
    assert params["daily"].split(",") == list(WEATHER_VARIABLES)
    fixed = load_settings(overrides={"weather": {"elevation": 5000}}).weather
    (request,) = plan_requests(spans(("EVER", date(2019, 2, 20), date(2019, 5, 20))), fixed)
    assert request.params(fixed)["elevation"] == "5000"
