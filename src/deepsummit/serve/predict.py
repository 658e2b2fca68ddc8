"""`deepsummit predict`: a thin client of the registered model.

It states one member's planned push in the model's input layout (deepsummit/serve/planned.py),
adds the 90 days of weather up to the push day from the warehouse, in the source the champion
was trained on, and asks the champion: its artifact, from a local copy checked against the
registered digest, answers through the very function its pyfunc runs (`scoring.answers`), so the
number is the registered model's without MLflow's import or a download on every call. The
features are built inside the model, by the training code, from what the model froze.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import duckdb
import polars as pl

from deepsummit.contracts.arrays import BAND_MEANING
from deepsummit.contracts.artifact import ModelArtifact
from deepsummit.contracts.champion import (
    ARTIFACT_PATH,
    TAG_WEATHER_SOURCE,
    champion_version,
    verified_copy,
)
from deepsummit.core.config import Settings
from deepsummit.core.errors import BadInput
from deepsummit.core.inputs import WEATHER_VARIABLES, WINDOW_DAYS
from deepsummit.core.planned import planned_frame, planned_record, season_of, today
from deepsummit.core.warehouse import connect, query
from deepsummit.serve.planned import parse_planned
from deepsummit.serve.scoring import answers

TOP_TOKENS = 5


@dataclass(frozen=True)
class Prediction:
    probability: float
    low: float
    high: float
    top_tokens: str
    notes: str
    weather_used: bool
    model_uri: str
    model_version: str
    weather_source: str
    attempt: Mapping[str, Any]  # the planned attempt as stated (deepsummit/core/planned.py)

    def render(self) -> str:
        a = self.attempt
        lines = [
            f"P(summit) = {self.probability:.3f} (band {self.low:.3f}–{self.high:.3f}) for "
            f"{a['peak']} on {a['push_date']} ({season_of(a)}), model {self.model_uri} "
            f"(v{self.model_version}, "
            + (
                f"weather {self.weather_source})"
                if self.weather_used
                else "without weather: the weather took no part)"
            ),
            f"band: {BAND_MEANING}",
            "tokens that weighed most (attention rollout from CLS):",
            *(f"  {token}" for token in _listed(self.top_tokens)),
        ]
        lines += [f"note: {note}" for note in _listed(self.notes)]
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        """The prediction as one JSON document (`deepsummit predict --json`): the notes and the
        tokens as lists, the attempt with its season."""
        return {
            **asdict(self),
            "top_tokens": _listed(self.top_tokens),
            "notes": _listed(self.notes),
            "attempt": {**self.attempt, "season": season_of(self.attempt)},
        }


def _listed(joined: str) -> list[str]:
    """The items of an answer's "; "-joined column (its notes, its top tokens)."""
    return [item.strip() for item in joined.split(";") if item.strip()]


def check_known(
    con: duckdb.DuckDBPyConnection, planned: Mapping[str, Any], today: dt.date
) -> list[str]:
    """Input the records have never seen, or a push day they cannot speak for: one clear line
    each, before any model is looked up. Returns the weather sources with days of the peak."""
    peak, nationality = planned["peak"], planned.get("nationality")
    push = planned["push_date"]
    [known] = query(
        con,
        "serving_known_inputs",
        {"peakid": peak, "nationality": nationality},
    ).to_dicts()
    if not known["peak_known"]:
        raise BadInput(f"unknown peak {peak!r}: not in the warehouse's peaks table")
    if known["first_record"] is None:
        raise BadInput(f"peak {peak!r}: no expedition of the records has a date on it")
    if push < known["first_record"]:
        raise BadInput(
            f"push_date {push}: before the records' first expedition on {peak} "
            f"({known['first_record']}); the model knows nothing of the peak then"
        )
    if push > today:
        raise BadInput(
            f"push_date {push}: in the future; `deepsummit outlook` answers for the coming "
            "days from a forecast"
        )
    if not known["nationality_known"]:
        raise BadInput(
            f"unknown nationality {nationality!r}: no member of the records has "
            "that citizenship (spell it as the records do, e.g. 'Nepal', 'USA', 'UK')"
        )
    return list(known["weather_sources"])


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
        raise BadInput(
            f"no weather for {peak} on {push} in source {source!r}: {missing} of {WINDOW_DAYS} "
            "days missing; load that period with `deepsummit weather` first"
        )
    return {name: frame[name].to_list() for name in WEATHER_VARIABLES}


def predict_attempt(settings: Settings, planned: Mapping[str, Any]) -> Prediction:
    """Score a planned attempt (field → value, as deepsummit/core/planned.py declares them; the
    weather comes from the warehouse) with the champion."""
    try:
        record = planned_record(planned)
    except ValueError as error:
        raise BadInput(str(error)) from None
    [error] = parse_planned(planned_frame([record])).errors
    if error:
        raise BadInput(error)
    with connect(settings.paths.warehouse, read_only=True) as con:
        # Before the registry is asked: bad input fails at once, naming what is wrong.
        sources = check_known(con, planned, today(settings.weather.timezone))
    champion = champion_version(settings.mlflow)
    name, version = champion.name, str(champion.version)
    source = champion.tags.get(TAG_WEATHER_SOURCE, settings.weather.source)
    # A peak the source has no weather of is answered as its attempts were trained: with the
    # weather absent. A peak it has weather of needs the whole window.
    weather, why_absent = {}, f"no weather of {planned['peak']} in source {source!r}"
    if source in sources:
        with connect(settings.paths.warehouse, read_only=True) as con:
            weather = daily_weather(con, planned["peak"], planned["push_date"], source)
        why_absent = ""
    local = verified_copy(settings.mlflow.tracking_uri, champion, settings.mlflow.model_cache_dir)
    artifact = ModelArtifact.load(local / ARTIFACT_PATH)
    request = planned_frame([{**record, "weather_source": source, **weather}])
    [answer] = answers(artifact, request, TOP_TOKENS).to_dict(orient="records")
    if answer["error"]:
        raise BadInput(answer["error"])
    return Prediction(
        probability=float(answer["probability"]),
        low=float(answer["probability_low"]),
        high=float(answer["probability_high"]),
        top_tokens=answer["top_tokens"] or "",
        notes="; ".join(filter(None, [why_absent, answer["notes"]])),
        weather_used=bool(answer["weather_used"]),
        model_uri=f"models:/{name}@{settings.mlflow.champion_alias}",
        model_version=version,
        weather_source=source,
        attempt=dict(planned),
    )
