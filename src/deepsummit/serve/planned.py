"""Planned attempts (deepsummit/core/planned.py declares the fields) turned into the
features' attempt-input rows and their daily weather: what the registered model scores. A row
that cannot be scored (an unknown season, an impossible date, weather that is not 90 days long)
gets a message in its own `error`; the other rows are scored.
"""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from deepsummit.core.inputs import WEATHER_VARIABLES, WINDOW_DAYS
from deepsummit.core.planned import AGE_RANGE, PLANNED_FIELDS, WEATHER_COLUMNS
from deepsummit.core.seasons import SEASON_BY_MONTH, expedition_year
from deepsummit.features.tabular import ATTEMPT_INPUT_SCHEMA

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class PlannedRows:
    """Valid rows in the features' attempt-input layout with their daily weather, and one error
    (or None) per row of the request."""

    attempts: pl.DataFrame  # ATTEMPT_INPUT_SCHEMA + `row` (position in the request)
    weather: pl.DataFrame  # row, date, the 15 variables: 90 days per valid row
    errors: list[str | None]
    sources: list[str | None]  # the weather source each row states


def _date(value: Any) -> dt.date | None:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    return dt.date.fromisoformat(str(value))


def _value(record: Mapping[str, Any], name: str) -> Any:
    """The record's value, None for absent, null or NaN."""
    value = record.get(name)
    if value is None:
        return None
    if isinstance(value, float) and np.isnan(value):
        return None
    # pandas' own markers (NA, NaT) come only from a pandas frame: with pandas not imported
    # there are none to look for, and a request of records (`deepsummit predict`) does not
    # pay pandas' import (a quarter of a second).
    pandas = sys.modules.get("pandas")
    if pandas is not None and (value is pandas.NA or value is pandas.NaT):
        return None
    return value


def _weather_values(record: Mapping[str, Any], name: str) -> np.ndarray:
    values = record.get(name)
    if values is None or (isinstance(values, float) and np.isnan(values)):
        return np.full(WINDOW_DAYS, np.nan)
    array = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    if array.shape != (WINDOW_DAYS,):
        raise ValueError(f"{name}: {array.size} daily values, expected {WINDOW_DAYS} (D-89 … D)")
    return array


def parse_planned(request: pd.DataFrame | Sequence[Mapping[str, Any]]) -> PlannedRows:
    """Turn a request (a frame, or its rows as records) into attempt-input rows and daily
    weather; a row that cannot be read gets its reason in `errors` and is left out of the
    frames."""
    records = request if isinstance(request, Sequence) else request.to_dict(orient="records")
    attempts: list[dict[str, Any]] = []
    weather: list[pl.DataFrame] = []
    errors: list[str | None] = []
    sources: list[str | None] = []
    for row, record in enumerate(records):
        sources.append(_value(record, "weather_source"))
        try:
            attempt, days = _parse_row(row, record)
        except (ValueError, TypeError) as error:
            errors.append(str(error))
            continue
        errors.append(None)
        attempts.append(attempt)
        weather.append(days)
    schema = {**ATTEMPT_INPUT_SCHEMA, "row": pl.Int64()}
    empty_weather = pl.DataFrame(
        schema={"row": pl.Int64, "date": pl.Date, **dict.fromkeys(WEATHER_VARIABLES, pl.Float64)}
    )
    return PlannedRows(
        attempts=pl.DataFrame(attempts, schema=schema),
        weather=pl.concat(weather) if weather else empty_weather,
        errors=errors,
        sources=sources,
    )


def _parse_row(row: int, record: Mapping[str, Any]) -> tuple[dict[str, Any], pl.DataFrame]:
    """One request row as an attempt-input row and its 90 days of weather, or a ValueError
    naming what is wrong with it. Each field is checked in turn, then the row is written out
    in the features' layout."""
    peak = _value(record, "peak")
    if not peak:
        raise ValueError("peak: required (a Himalayan Database peak id, e.g. EVER)")
    push = _date_field(record, "push_date")
    if push is None:
        raise ValueError("push_date: required (YYYY-MM-DD)")
    for field in PLANNED_FIELDS:
        value = _value(record, field.name)
        if field.choices and value is not None and value not in field.choices:
            raise ValueError(f"{field.name} {value!r}: expected one of {', '.join(field.choices)}")
    season = _value(record, "season") or SEASON_BY_MONTH[push.month]
    age = _value(record, "age")
    low, high = AGE_RANGE
    if age is not None and not low <= float(age) <= high:
        raise ValueError(f"age {age:g}: not in {low}..{high}")
    sex = _value(record, "sex")
    team_size, staff_size = _value(record, "team_size"), _value(record, "staff_size")
    if team_size is not None and float(team_size) < 1:
        raise ValueError(f"team_size {team_size:g}: must be at least 1")
    if staff_size is not None and float(staff_size) < 0:
        raise ValueError(f"staff_size {staff_size:g}: must not be negative")
    basecamp = _date_field(record, "basecamp_date")
    weather = _weather_window(row, record, push)
    attempt = {
        "row": row,
        "expid": "PLANNED",
        "member_id": f"PLANNED-{row:04d}",
        "year": expedition_year(season, push),
        "season": season,
        "peakid": str(peak),
        "smtdate": push,
        "route1": _value(record, "route"),
        "style": _value(record, "style"),
        "totmembers": None if team_size is None else round(float(team_size)),
        "commercial": _value(record, "commercial"),
        "o2_planned": _value(record, "oxygen"),
        "agency": _value(record, "agency"),
        "hired_staff": None if staff_size is None else round(float(staff_size)),
        "basecamp_date": basecamp,
        "sex": sex,
        "age": None if age is None else round(float(age)),
        "citizenship": _value(record, "nationality"),
        "expedition_role": _value(record, "role"),
        "hired": bool(_value(record, "hired") or False),
        "oxygen_used": None,  # recorded after the climb: never known to a planned attempt
        "climber_id": _value(record, "climber_id"),
    }
    return attempt, weather


def _date_field(record: Mapping[str, Any], name: str) -> dt.date | None:
    """The record's date `name`, None when absent; a ValueError when it is not a date."""
    try:
        return _date(_value(record, name))
    except ValueError:
        raise ValueError(f"{name} {record.get(name)!r}: not a date YYYY-MM-DD") from None


def _weather_window(row: int, record: Mapping[str, Any], push: dt.date) -> pl.DataFrame:
    """The record's daily weather of the 90 days ending on `push` (NaN = missing: null)."""
    days = {name: _weather_values(record, name) for name in WEATHER_COLUMNS}
    first = push - dt.timedelta(days=WINDOW_DAYS - 1)
    return pl.DataFrame(
        {
            "row": np.full(WINDOW_DAYS, row, dtype=np.int64),
            "date": pl.date_range(first, push, eager=True),
            **days,
        }
    ).with_columns(pl.col(WEATHER_VARIABLES).fill_nan(None))
