"""Scoring a planned attempt with the champion, through the training feature code.

`deepsummit predict` states one member's planned push (peak, day, attributes); the features are
built from the warehouse by the same SQL as training, the champion's pyfunc turns them into
P(summit), and attention rollout names the tokens that weighed most.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import duckdb
import mlflow
import numpy as np
import polars as pl

from pipeline.config import Settings
from pipeline.errors import PipelineError
from pipeline.features.spec import WINDOW_DAYS
from pipeline.features.tabular import ATTEMPT_INPUT_SCHEMA, attempt_features
from pipeline.features.windows import window_for
from pipeline.serve.pyfunc import TOKEN_NAMES, DeepSummitModel, token_importance
from pipeline.train.trainer import predict_proba
from pipeline.warehouse import connect, query

# HDB seasons by month (the records' convention: Winter is December to February).
SEASON_BY_MONTH = {
    **dict.fromkeys((3, 4, 5), "Spring"),
    **dict.fromkeys((6, 7, 8), "Summer"),
    **dict.fromkeys((9, 10, 11), "Autumn"),
    **dict.fromkeys((12, 1, 2), "Winter"),
}
AGE_RANGE = (1, 100)  # the ingest's range for member ages
TOP_TOKENS = 5


@dataclass(frozen=True)
class PlannedAttempt:
    """One member's planned summit push, as a person states it (no outcome)."""

    peakid: str
    date: dt.date
    age: int | None = None
    sex: str | None = None  # "M" / "F"
    nationality: str | None = None  # citizenship as the records spell it, e.g. "Nepal"
    role: str | None = "Climber"
    hired: bool = False
    team_size: int | None = None  # members of the expedition
    oxygen: bool | None = None  # planned use of supplemental oxygen
    commercial: bool | None = None
    route: str | None = None  # route1 as the records spell it, e.g. "S Col-SE Ridge"
    style: str | None = None  # expedition style, e.g. "Standard"
    climber_id: str | None = None  # native HDB export only: enables experience features

    @property
    def season(self) -> str:
        return SEASON_BY_MONTH[self.date.month]


@dataclass(frozen=True)
class Prediction:
    probability: float
    top_tokens: tuple[tuple[str, float], ...]  # (token name, share of CLS attention rollout)
    notes: tuple[str, ...]
    model_uri: str
    model_version: str
    weather_source: str
    attempt: PlannedAttempt

    def render(self) -> str:
        a = self.attempt
        lines = [
            f"P(summit) = {self.probability:.3f} for {a.peakid} on {a.date} ({a.season}), "
            f"model {self.model_uri} (v{self.model_version}, weather {self.weather_source})",
            "tokens that weighed most (attention rollout from CLS):",
            *(f"  {name:<32}{share:>7.1%}" for name, share in self.top_tokens),
        ]
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)


def predict_attempt(settings: Settings, planned: PlannedAttempt) -> Prediction:
    """Score a planned attempt with the champion, through the training feature code."""
    with connect(settings.paths.warehouse, read_only=True) as con:
        _check_attempt(con, planned)  # before the model download: bad input fails at once
    name, alias = settings.mlflow.registered_model, settings.mlflow.champion_alias
    client = mlflow.MlflowClient(settings.mlflow.tracking_uri)
    try:
        version = str(client.get_model_version_by_alias(name, alias).version)
    except mlflow.exceptions.MlflowException:
        raise PipelineError(
            f"no model {name}@{alias} at {settings.mlflow.tracking_uri}: run `deepsummit train`"
        ) from None
    uri = f"models:/{name}/{version}"  # pinned: the alias may move while this runs
    mlflow.set_tracking_uri(settings.mlflow.tracking_uri)
    pyfunc = mlflow.pyfunc.load_model(uri)
    champion: DeepSummitModel = pyfunc.unwrap_python_model()
    preprocessor = champion.preprocessor
    source = preprocessor.weather_source
    with connect(settings.paths.warehouse, read_only=True) as con:
        window = window_for(con, planned.peakid, planned.date, source)
        missing = int(window["missing_days"].max()) if window.height else WINDOW_DAYS
        allowed = int(preprocessor.extra.get("max_missing_days", 0))
        if missing > allowed:
            raise PipelineError(
                f"no weather for {planned.peakid} on {planned.date} in source {source!r}: "
                f"{missing} of {WINDOW_DAYS} window days missing (at most {allowed} allowed); "
                "load that period with `deepsummit weather` first"
            )
        features = attempt_features(
            con,
            _attempt_row(planned),
            source,
            float(preprocessor.extra.get("success_rate_prior_strength", 0.0)),
        )
    arrays = preprocessor.transform(features, window)
    probability = float(predict_proba(champion.model, arrays)[0])
    shares = token_importance(champion.model, arrays)[0]
    order = np.argsort(shares)[::-1][:TOP_TOKENS]
    return Prediction(
        probability=probability,
        top_tokens=tuple((TOKEN_NAMES[1 + i], float(shares[i])) for i in order),
        notes=tuple(preprocessor.unknown_notes(features)),
        model_uri=f"models:/{name}@{alias}",
        model_version=version,
        weather_source=source,
        attempt=planned,
    )


def _check_attempt(con: duckdb.DuckDBPyConnection, planned: PlannedAttempt) -> None:
    """Input a model would silently mis-read: one clear line each."""
    low, high = AGE_RANGE
    if planned.age is not None and not low <= planned.age <= high:
        raise PipelineError(f"age {planned.age}: not in {low}..{high}")
    if planned.sex not in (None, "M", "F"):
        raise PipelineError(f"sex {planned.sex!r}: expected M or F")
    if planned.team_size is not None and planned.team_size < 1:
        raise PipelineError(f"team size {planned.team_size}: must be at least 1")
    [known] = query(
        con,
        "serving_known_inputs",
        {"peakid": planned.peakid, "nationality": planned.nationality},
    ).to_dicts()
    if not known["peak_known"]:
        raise PipelineError(f"unknown peak {planned.peakid!r}: not in the warehouse's peaks table")
    if not known["nationality_known"]:
        raise PipelineError(
            f"unknown nationality {planned.nationality!r}: no member of the records has "
            "that citizenship (spell it as the records do, e.g. 'Nepal', 'USA', 'UK')"
        )


def _attempt_row(planned: PlannedAttempt) -> pl.DataFrame:
    """The planned attempt in the features stage's attempt input layout."""
    return pl.DataFrame(
        [
            {
                "expid": "PLANNED",
                "member_id": "PLANNED-01",
                "year": planned.date.year,
                "season": planned.season,
                "peakid": planned.peakid,
                "smtdate": planned.date,
                "route1": planned.route,
                "style": planned.style,
                "totmembers": planned.team_size,
                "commercial": planned.commercial,
                "o2used": planned.oxygen,
                "sex": planned.sex,
                "age": planned.age,
                "citizenship": planned.nationality,
                "expedition_role": planned.role,
                "hired": planned.hired,
                "oxygen_used": planned.oxygen,
                "climber_id": planned.climber_id,
            }
        ],
        schema=ATTEMPT_INPUT_SCHEMA,
    )
