"""`deepsummit predict`: a thin client of the registered model.

It states one member's planned push in the model's input layout (pipeline/serve/planned.py),
adds the 90 days of weather up to the push day from the warehouse, in the source the champion
was trained on, and asks the champion (its files checked against their registered digest). The
features are built inside the model, by the training code, from what the model froze.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass
from typing import Any

import duckdb
import pandas as pd
import polars as pl

from pipeline.config import Settings
from pipeline.errors import PipelineError
from pipeline.features.spec import WEATHER_VARIABLES, WINDOW_DAYS
from pipeline.serve.planned import SEASON_BY_MONTH, parse_planned
from pipeline.train.registry import TAG_WEATHER_SOURCE, champion_version, load_verified
from pipeline.warehouse import connect, query

TOP_TOKENS = 5


@dataclass(frozen=True)
class PlannedAttempt:
    """One member's planned summit push, as a person states it (no outcome)."""

    peak: str
    push_date: dt.date
    age: int | None = None
    sex: str | None = None  # "M" / "F"
    nationality: str | None = None  # citizenship as the records spell it, e.g. "Nepal"
    role: str | None = "Climber"
    hired: bool = False
    team_size: int | None = None  # members of the expedition
    staff_size: int | None = None  # hired staff of the expedition
    agency: str | None = None
    route: str | None = None  # route1 as the records spell it, e.g. "S Col-SE Ridge"
    style: str | None = None  # expedition style, e.g. "Standard"
    commercial: bool | None = None
    oxygen: bool | None = None  # the expedition plans supplemental oxygen
    basecamp_date: dt.date | None = None
    climber_id: str | None = None  # native HDB export only: enables experience features
    season: str | None = None  # default: from the push date

    @property
    def season_name(self) -> str:
        return self.season or SEASON_BY_MONTH[self.push_date.month]

    def record(self) -> dict[str, Any]:
        """The attempt in the model's input layout, without its weather. Counts go as floats:
        the signature's numbers are doubles (a count may be missing), and MLflow refuses an
        integer column for a double."""
        values = asdict(self)
        for name in ("age", "team_size", "staff_size"):
            values[name] = None if values[name] is None else float(values[name])
        values["push_date"] = self.push_date.isoformat()
        if self.basecamp_date is not None:
            values["basecamp_date"] = self.basecamp_date.isoformat()
        return values


@dataclass(frozen=True)
class Prediction:
    probability: float
    low: float
    high: float
    top_tokens: str
    notes: str
    model_uri: str
    model_version: str
    weather_source: str
    attempt: PlannedAttempt

    def render(self) -> str:
        a = self.attempt
        lines = [
            f"P(summit) = {self.probability:.3f} (seeds {self.low:.3f}–{self.high:.3f}) for "
            f"{a.peak} on {a.push_date} ({a.season_name}), model {self.model_uri} "
            f"(v{self.model_version}, weather {self.weather_source})",
            "tokens that weighed most (attention rollout from CLS):",
            *(f"  {token.strip()}" for token in self.top_tokens.split(";") if token.strip()),
        ]
        lines += [f"note: {note.strip()}" for note in self.notes.split(";") if note.strip()]
        return "\n".join(lines)


def check_known(con: duckdb.DuckDBPyConnection, planned: PlannedAttempt) -> None:
    """Input the records have never seen: one clear line each, before any model is loaded."""
    [known] = query(
        con,
        "serving_known_inputs",
        {"peakid": planned.peak, "nationality": planned.nationality},
    ).to_dicts()
    if not known["peak_known"]:
        raise PipelineError(f"unknown peak {planned.peak!r}: not in the warehouse's peaks table")
    if not known["nationality_known"]:
        raise PipelineError(
            f"unknown nationality {planned.nationality!r}: no member of the records has "
            "that citizenship (spell it as the records do, e.g. 'Nepal', 'USA', 'UK')"
        )


def daily_weather(
    con: duckdb.DuckDBPyConnection, peak: str, push: dt.date, source: str
) -> dict[str, list[float | None]]:
    """The 90 daily values D-89 … D of each variable from weather_daily (None where absent)."""
    days = pl.date_range(push - dt.timedelta(days=WINDOW_DAYS - 1), push, eager=True)
    rows = query(
        con,
        "serving_daily_weather",
        {"peakid": peak, "source": source, "first": days[0], "last": push},
    )
    frame = pl.DataFrame({"date": days}).join(rows, on="date", how="left")
    missing = frame.filter(pl.all_horizontal(pl.col(WEATHER_VARIABLES).is_null())).height
    if missing:
        raise PipelineError(
            f"no weather for {peak} on {push} in source {source!r}: {missing} of {WINDOW_DAYS} "
            "days missing; load that period with `deepsummit weather` first"
        )
    return {name: frame[name].to_list() for name in WEATHER_VARIABLES}


def predict_attempt(settings: Settings, planned: PlannedAttempt) -> Prediction:
    """Score a planned attempt with the champion."""
    request = {**planned.record(), **dict.fromkeys(WEATHER_VARIABLES)}
    [error] = parse_planned(pd.DataFrame([request])).errors
    if error:
        raise PipelineError(error)
    with connect(settings.paths.warehouse, read_only=True) as con:
        check_known(con, planned)  # before the model download: bad input fails at once
    champion = champion_version(settings.mlflow)
    name, version = champion.name, str(champion.version)
    source = champion.tags.get(TAG_WEATHER_SOURCE, settings.weather.source)
    with connect(settings.paths.warehouse, read_only=True) as con:
        weather = daily_weather(con, planned.peak, planned.push_date, source)
    model = load_verified(settings.mlflow.tracking_uri, name, version)
    request = {**planned.record(), "weather_source": source, **weather}
    [answer] = model.predict(pd.DataFrame([request]), params={"top_tokens": TOP_TOKENS}).to_dict(
        orient="records"
    )
    if answer["error"]:
        raise PipelineError(answer["error"])
    return Prediction(
        probability=float(answer["probability"]),
        low=float(answer["probability_low"]),
        high=float(answer["probability_high"]),
        top_tokens=answer["top_tokens"] or "",
        notes=answer["notes"] or "",
        model_uri=f"models:/{name}@{settings.mlflow.champion_alias}",
        model_version=version,
        weather_source=source,
        attempt=planned,
    )
