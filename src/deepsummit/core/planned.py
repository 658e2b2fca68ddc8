"""A planned attempt as a user states it, declared once: the registered model's input (one row
per member and push day), the options of `deepsummit predict` and `deepsummit outlook`, the
outlook's settings and the README's table are all derived from `PLANNED_FIELDS`.

A planned attempt holds what a climber or an operator knows before the push, and the 90 days
of weather up to it (history plus forecast), nothing recorded afterwards. Every field but
`peak` and `push_date` may be left out or null: the model sees the value as missing (or
unknown), never as a made-up number.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from zoneinfo import ZoneInfo

from deepsummit.core.inputs import WEATHER_VARIABLES, WINDOW_DAYS
from deepsummit.core.seasons import SEASON_BY_MONTH, SEASONS

if TYPE_CHECKING:
    import pandas as pd

FieldType = Literal["string", "double", "boolean", "date"]
# Who a field describes: the attempt itself, one member of the team, or the expedition's plan
# (shared by every member of an outlook's team).
Scope = Literal["attempt", "member", "plan"]


@dataclass(frozen=True)
class PlannedField:
    name: str
    type: FieldType
    scope: Scope
    help: str
    required: bool = False
    default: Any = None  # what an unstated value means; None = missing
    choices: tuple[str, ...] = ()  # the values a string may take; () = any

    @property
    def python_type(self) -> Any:
        if self.choices:
            return Literal[self.choices]
        return {"string": str, "double": float, "boolean": bool, "date": dt.date}[self.type]

    @property
    def signature_type(self) -> str:
        """The MLflow column type: a date travels as ISO text (YYYY-MM-DD)."""
        return "string" if self.type == "date" else self.type


PLANNED_FIELDS: tuple[PlannedField, ...] = (
    PlannedField("peak", "string", "attempt", "Himalayan Database peak id, e.g. EVER", True),
    PlannedField("push_date", "date", "attempt", "the summit push day D, YYYY-MM-DD", True),
    PlannedField(
        "season", "string", "attempt", "the expedition's season; default from the date (Dec–Feb: "
        "Winter)", choices=SEASONS,
    ),
    PlannedField("age", "double", "member", "age of the member, years"),
    PlannedField("sex", "string", "member", "M or F", choices=("M", "F")),
    PlannedField(
        "nationality", "string", "member", "citizenship as the records spell it, e.g. Nepal, USA"
    ),
    PlannedField(
        "role", "string", "member", "expedition role, e.g. Climber, Leader", default="Climber"
    ),
    PlannedField(
        "hired", "boolean", "member", "hired staff (e.g. high-altitude porters)", default=False
    ),
    PlannedField(
        "climber_id", "string", "member", "climber id of the native HDB export (experience)"
    ),
    PlannedField("team_size", "double", "plan", "members of the expedition"),
    PlannedField("staff_size", "double", "plan", "hired staff of the expedition"),
    PlannedField("agency", "string", "plan", "organising agency as the records spell it"),
    PlannedField("route", "string", "plan", 'route as the records spell it, e.g. "S Col-SE Ridge"'),
    PlannedField("style", "string", "plan", "expedition style, e.g. Standard"),
    PlannedField("commercial", "boolean", "plan", "a commercial expedition"),
    PlannedField("oxygen", "boolean", "plan", "the expedition plans supplemental oxygen"),
    PlannedField("basecamp_date", "date", "plan", "arrival at base camp, YYYY-MM-DD"),
    PlannedField(
        "weather_source", "string", "attempt",
        "where the weather rows come from (archive, open-meteo, forecast@…)",
    ),
)  # fmt: skip
FIELDS_BY_NAME: dict[str, PlannedField] = {f.name: f for f in PLANNED_FIELDS}
# column → (type for the MLflow signature, required)
PLANNED_COLUMNS: dict[str, tuple[str, bool]] = {
    f.name: (f.signature_type, f.required) for f in PLANNED_FIELDS
}
WEATHER_COLUMNS: tuple[str, ...] = WEATHER_VARIABLES  # each an array of WINDOW_DAYS values

# The attempts of the warehouse, when asked as planned attempts (tests, the gate), keep their key.
KEY_COLUMNS: tuple[str, ...] = ("expid", "member_id", "year")
AGE_RANGE = (1, 100)  # the ingest's range for member ages


def fields_of(*scopes: Scope) -> tuple[PlannedField, ...]:
    return tuple(f for f in PLANNED_FIELDS if f.scope in scopes)


def season_of(values: Mapping[str, Any]) -> str:
    """The stated season, else the push date's."""
    return values.get("season") or SEASON_BY_MONTH[values["push_date"].month]


def planned_record(values: Mapping[str, Any]) -> dict[str, Any]:
    """One planned attempt as a row of the model's input, without its weather: every declared
    field, unstated ones at their default, dates as ISO text and numbers as floats (the
    signature's numbers are doubles, as a count may be missing, and MLflow refuses an integer
    column for a double)."""
    unknown = set(values) - set(FIELDS_BY_NAME)
    if unknown:
        raise ValueError(f"not a field of a planned attempt: {', '.join(sorted(unknown))}")
    record: dict[str, Any] = {}
    for field in PLANNED_FIELDS:
        value = values.get(field.name, field.default)
        if value is not None and field.type == "date":
            value = value.isoformat()
        elif value is not None and field.type == "double":
            value = float(value)
        record[field.name] = value
    return record


def planned_frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    """Planned-attempt rows (`planned_record`, with their weather arrays) as the model's input
    frame: number columns stay doubles even when every value is missing."""
    import pandas as pd  # here: the settings import this module, and most commands need no frame

    frame = pd.DataFrame(records)
    for field in PLANNED_FIELDS:
        if field.type == "double" and field.name in frame:
            frame[field.name] = frame[field.name].astype("float64")
    return frame


def markdown_table() -> str:
    """The fields as the README documents them (a test keeps the two equal)."""
    lines = ["| column | type | who | note |", "| --- | --- | --- | --- |"]
    for f in PLANNED_FIELDS:
        note = f"{f.help} (required)" if f.required else f.help
        lines.append(f"| `{f.name}` | {f.type} | {f.scope} | {note} |")
    lines.append(
        f"| each of the {len(WEATHER_COLUMNS)} weather variables | array of double | attempt | "
        f"{WINDOW_DAYS} daily values, D-{WINDOW_DAYS - 1} first; null = missing |"
    )
    return "\n".join(lines)


def today(timezone: str) -> dt.date:
    """The date in `timezone` (the climbers' own: a push day is a local date)."""
    return dt.datetime.now(ZoneInfo(timezone)).date()
