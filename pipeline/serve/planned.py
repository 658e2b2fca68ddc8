"""A planned attempt as a user states it: the registered model's input, one row per member and
push day. What a climber or an operator knows before the push, and the 90 days of weather up to
it (history plus forecast), nothing recorded afterwards.

| column | type | note |
| --- | --- | --- |
| peak | string | Himalayan Database peak id, e.g. EVER (required) |
| push_date | string | the summit push day D, YYYY-MM-DD (required) |
| season | string | the expedition's season; default from the date (Dec–Feb: Winter) |
| age | double | years |
| sex | string | M or F |
| nationality | string | citizenship as the records spell it, e.g. Nepal, USA |
| role | string | expedition role, e.g. Climber, Leader |
| hired | boolean | hired staff (e.g. high-altitude porters) |
| team_size | double | members of the expedition |
| staff_size | double | hired staff of the expedition |
| agency | string | organising agency as the records spell it |
| route | string | route as the records spell it, e.g. "S Col-SE Ridge" |
| style | string | expedition style, e.g. Standard |
| commercial | boolean | a commercial expedition |
| oxygen | boolean | the expedition plans supplemental oxygen |
| basecamp_date | string | arrival at base camp, YYYY-MM-DD |
| climber_id | string | climber id of the native HDB export (experience features) |
| weather_source | string | where the weather rows come from (archive, open-meteo, forecast) |
| each of the 15 weather variables | array of double | 90 daily values, D-89 first; null = missing |

Every column but `peak` and `push_date` may be left out or null: the model sees the value as
missing (or unknown), never as a made-up number. A row that cannot be scored (an unknown peak,
an impossible date, weather that is not 90 days long) gets a message in its own `error`; the
other rows are scored.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import polars as pl

from pipeline.features.spec import WEATHER_VARIABLES, WINDOW_DAYS
from pipeline.features.tabular import ATTEMPT_INPUT_SCHEMA
from pipeline.warehouse import registered, sql

# column → (type for the MLflow signature, required)
PLANNED_COLUMNS: dict[str, tuple[str, bool]] = {
    "peak": ("string", True),
    "push_date": ("string", True),
    "season": ("string", False),
    "age": ("double", False),
    "sex": ("string", False),
    "nationality": ("string", False),
    "role": ("string", False),
    "hired": ("boolean", False),
    "team_size": ("double", False),
    "staff_size": ("double", False),
    "agency": ("string", False),
    "route": ("string", False),
    "style": ("string", False),
    "commercial": ("boolean", False),
    "oxygen": ("boolean", False),
    "basecamp_date": ("string", False),
    "climber_id": ("string", False),
    "weather_source": ("string", False),
}
WEATHER_COLUMNS: tuple[str, ...] = WEATHER_VARIABLES  # each an array of WINDOW_DAYS values
AGE_RANGE = (1, 100)  # the ingest's range for member ages
SEASONS = ("Spring", "Summer", "Autumn", "Winter")
# HDB seasons by month; Winter is December to February and belongs to the December's year.
SEASON_BY_MONTH = {
    **dict.fromkeys((3, 4, 5), "Spring"),
    **dict.fromkeys((6, 7, 8), "Summer"),
    **dict.fromkeys((9, 10, 11), "Autumn"),
    **dict.fromkeys((12, 1, 2), "Winter"),
}


def expedition_year(season: str, day: dt.date) -> int:
    """The expedition year of a push on `day` in `season` (Winter pushes in Jan/Feb: the year
    before)."""
    return day.year - 1 if season == "Winter" and day.month <= 2 else day.year


KEY_COLUMNS: tuple[str, ...] = ("expid", "member_id", "year")


def planned_attempts(
    con: duckdb.DuckDBPyConnection, keys: pl.DataFrame, source: str
) -> pl.DataFrame:
    """Attempts of the warehouse (`keys`: expid, member_id, year) in this layout, with their
    weather from `source`, keyed by KEY_COLUMNS (sql/serving_planned_attempts.sql)."""
    lists = ",\n        ".join(
        f'list(w."{name}" ORDER BY d.days_back DESC) AS "{name}"' for name in WEATHER_VARIABLES
    )
    text = sql("serving_planned_attempts").replace("{{weather_lists}}", lists)
    with registered(con, planned_keys=keys.select(KEY_COLUMNS)):
        return con.sql(text, params={"source": source}).pl()


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


def _value(record: dict[str, Any], name: str) -> Any:
    """The record's value, None for absent, null or NaN."""
    value = record.get(name)
    if value is None:
        return None
    if isinstance(value, float) and np.isnan(value):
        return None
    if value is pd.NA or value is pd.NaT:
        return None
    return value


def _weather_values(record: dict[str, Any], name: str) -> np.ndarray:
    values = record.get(name)
    if values is None or (isinstance(values, float) and np.isnan(values)):
        return np.full(WINDOW_DAYS, np.nan)
    array = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    if array.shape != (WINDOW_DAYS,):
        raise ValueError(f"{name}: {array.size} daily values, expected {WINDOW_DAYS} (D-89 … D)")
    return array


def parse_planned(frame: pd.DataFrame) -> PlannedRows:
    """Turn a request into attempt-input rows and daily weather; a row that cannot be read gets
    its reason in `errors` and is left out of the frames."""
    attempts: list[dict[str, Any]] = []
    weather: list[pl.DataFrame] = []
    errors: list[str | None] = []
    sources: list[str | None] = []
    for row, record in enumerate(frame.to_dict(orient="records")):
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


def _parse_row(row: int, record: dict[str, Any]) -> tuple[dict[str, Any], pl.DataFrame]:
    peak = _value(record, "peak")
    if not peak:
        raise ValueError("peak: required (a Himalayan Database peak id, e.g. EVER)")
    try:
        push = _date(_value(record, "push_date"))
    except ValueError:
        raise ValueError(f"push_date {record.get('push_date')!r}: not a date YYYY-MM-DD") from None
    if push is None:
        raise ValueError("push_date: required (YYYY-MM-DD)")
    season = _value(record, "season") or SEASON_BY_MONTH[push.month]
    if season not in SEASONS:
        raise ValueError(f"season {season!r}: expected one of {', '.join(SEASONS)}")
    age = _value(record, "age")
    low, high = AGE_RANGE
    if age is not None and not low <= float(age) <= high:
        raise ValueError(f"age {age:g}: not in {low}..{high}")
    sex = _value(record, "sex")
    if sex not in (None, "M", "F"):
        raise ValueError(f"sex {sex!r}: expected M or F")
    team_size, staff_size = _value(record, "team_size"), _value(record, "staff_size")
    if team_size is not None and float(team_size) < 1:
        raise ValueError(f"team_size {team_size:g}: must be at least 1")
    if staff_size is not None and float(staff_size) < 0:
        raise ValueError(f"staff_size {staff_size:g}: must not be negative")
    try:
        basecamp = _date(_value(record, "basecamp_date"))
    except ValueError:
        raise ValueError(
            f"basecamp_date {record.get('basecamp_date')!r}: not a date YYYY-MM-DD"
        ) from None
    days = {name: _weather_values(record, name) for name in WEATHER_COLUMNS}
    first = push - dt.timedelta(days=WINDOW_DAYS - 1)
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
    weather = pl.DataFrame(
        {
            "row": np.full(WINDOW_DAYS, row, dtype=np.int64),
            "date": pl.date_range(first, push, eager=True),
            **days,
        }
    ).with_columns(pl.col(WEATHER_VARIABLES).fill_nan(None))
    return attempt, weather
