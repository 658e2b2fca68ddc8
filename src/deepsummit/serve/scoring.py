"""Scoring planned attempts with a model artifact: the one path the registered pyfunc, `deepsummit
predict` and the outlook share.

The features are computed with the training code: the tabular SQL over the history tables frozen
into the artifact (as of the records the model was trained with), the windows SQL over the
request's 90 daily weather rows, the artifact's preprocessing. Each ensemble member (every
member of every seed's network) gives a logit: the calibration map (reading the member's age
band when it shifts by age) turns the logit of their mean probability into the answer, and each
one into a probability, whose lowest and highest are the band. A version that serves a blend
(deepsummit/contracts/blend.py) mixes that answer, and each end of the band, with its tree's.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import duckdb
import numpy as np
import polars as pl
import torch

from deepsummit.contracts.artifact import ModelArtifact
from deepsummit.contracts.blend import mix
from deepsummit.core.inputs import WEATHER_VARIABLES, WINDOW_DAYS, WINDOW_SCALES
from deepsummit.features.tabular import attempt_features, register_history
from deepsummit.features.windows import compute_windows
from deepsummit.model.transformer import DeepSummitTransformer
from deepsummit.serve.inference import ensemble_logit, member_logits, to_tensors
from deepsummit.serve.planned import PlannedRows, parse_planned

if TYPE_CHECKING:
    import pandas as pd

REQUEST_SOURCE = "request"  # the weather_daily source name of a request's own rows
# The note on an answer the weather took no part in (a request row without any weather).
WEATHER_ABSENT_NOTE = (
    "weather absent: this P reads the planned attempt and the records only, the weather took "
    "no part"
)
# The scratch database the features are computed in: one in memory per process, and for each
# scoring a connection of its own to it (`cursor()`, about 1 ms, where a new database costs
# 15 ms, a tenth of a scorer's request). A connection's views are its own, so threads scoring
# at once never see each other's frames. Made in the process that uses it, never inherited
# through a fork (a forked child lacks the database's threads).
_scratch: tuple[int, duckdb.DuckDBPyConnection] | None = None
_SCRATCH_LOCK = threading.Lock()


def scratch_connection() -> duckdb.DuckDBPyConnection:
    """A new connection to this process's scratch database (close it when done)."""
    global _scratch
    with _SCRATCH_LOCK:
        if _scratch is None or _scratch[0] != os.getpid():
            _scratch = (os.getpid(), duckdb.connect())
        return _scratch[1].cursor()


def weather_token_names() -> tuple[str, ...]:
    """Readable names of the 26 weather tokens: "weather 1d D-3", "weather 3d D-29…D-27"."""
    names = []
    for scale in WINDOW_SCALES:
        width = scale.days_per_token
        for bucket in range(scale.tokens):
            newest = (scale.tokens - 1 - bucket) * width
            oldest = newest + width - 1
            day = "D" if newest == 0 else f"D-{newest}"
            span = day if width == 1 else f"D-{oldest}…{day}"
            names.append(f"weather {width}d {span}")
    return tuple(names)


def token_importance(
    model: DeepSummitTransformer, inputs: dict[str, np.ndarray], rows_per_pass: int = 1024
) -> np.ndarray:
    """Attention rollout from CLS (Abnar & Zuidema 2020), averaged over heads: (N, tokens − 1),
    one share per non-CLS token, each row summing to 1, `rows_per_pass` rows a forward pass."""
    n = len(inputs["numeric"])
    return np.concatenate(
        [
            _rollout_from_cls(
                model, {k: v[start : start + rows_per_pass] for k, v in inputs.items()}
            )
            for start in range(0, n, rows_per_pass)
        ]
    )


def _rollout_from_cls(model: DeepSummitTransformer, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """The rollout of one forward pass. The residual path counts as half of each layer's
    mixing, as in the paper."""
    model.eval()
    with torch.inference_mode():
        _, attention = model(**to_tensors(inputs), return_attention=True)
    size = attention[0].shape[-1]
    rollout = torch.eye(size).expand(len(inputs["numeric"]), size, size)
    for layer in attention:
        mixing = 0.5 * layer.mean(dim=1) + 0.5 * torch.eye(size)
        rollout = (mixing / mixing.sum(dim=-1, keepdim=True)) @ rollout
    from_cls = rollout[:, 0, 1:]
    return (from_cls / from_cls.sum(dim=-1, keepdim=True)).numpy()


@dataclass(frozen=True)
class Scored:
    """The model's answer per request row (NaN and an `error` where a row could not be scored)."""

    probability: np.ndarray  # calibrated, of the ensemble members' mean probability
    low: np.ndarray  # the lowest and highest calibrated probability of the members
    high: np.ndarray
    weather_used: list[bool | None]  # whether any weather reached the model (None: not scored)
    errors: list[str | None]
    notes: list[str]
    top_tokens: list[list[tuple[str, float]]]
    parts: str  # the models that answered, with their weights (ModelArtifact.parts)

    def token_text(self, row: int) -> str:
        """The tokens that weighed most in the answer to `row`, "; "-joined with their share."""
        return "; ".join(f"{name} {share:.1%}" for name, share in self.top_tokens[row])

    def frame(self, with_tokens: bool = False) -> pd.DataFrame:
        """The answer as the pyfunc returns it. A row without a value holds None, never NaN,
        so that the scoring server's JSON is JSON (`null`) for every client."""
        import pandas as pd  # here: `deepsummit predict` reads the answer without a frame

        def numbers(values: np.ndarray) -> pd.Series:
            return pd.Series([None if np.isnan(v) else float(v) for v in values], dtype=object)

        frame = pd.DataFrame(
            {
                "probability": numbers(self.probability),
                "probability_low": numbers(self.low),
                "probability_high": numbers(self.high),
                "weather_used": pd.Series(self.weather_used, dtype=object),
                "error": pd.Series(self.errors, dtype=object),
                "notes": self.notes,
                "answered_by": [self.parts] * len(self.notes),
            }
        )
        if with_tokens:
            frame["top_tokens"] = [self.token_text(row) for row in range(len(self.top_tokens))]
        return frame


def planned_features(
    artifact: ModelArtifact, planned: PlannedRows, errors: list[str | None]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The features and weather windows of the rows of `planned` the model can score, by the
    training SQL (`window_id` = the row's position); a row it cannot gets its reason in
    `errors` (one entry per request row)."""
    attempts = _known_peaks(artifact, planned.attempts, errors)
    if not attempts.height:
        return pl.DataFrame(), pl.DataFrame()
    with scratch_connection() as con:
        register_history(con, artifact.history)
        prior = float(artifact.preprocessor.extra.get("success_rate_prior_strength", 0.0))
        # Each request row has its own window, named by the row's position.
        row_of = attempts.select("member_id", window_id=pl.col("row").cast(pl.String))
        features = attempt_features(con, attempts, prior).join(row_of, on="member_id")
        windows = _windows(con, attempts, planned.weather)
    return _complete_windows(artifact, features, windows, errors)


def score(
    artifact: ModelArtifact,
    request: pd.DataFrame | Sequence[Mapping[str, Any]],
    top_tokens: int = 0,
    rows_per_pass: int = 1024,
) -> Scored:
    """Score every row of `request` (the layout of deepsummit/serve/planned.py: a frame, or its
    rows as records), `rows_per_pass` rows in each forward pass (1: each answer is, to the last
    bit, the model's answer to that row asked alone; in a batch it may differ by 1e-9)."""
    planned = parse_planned(request)
    n = len(planned.errors)
    errors = list(planned.errors)
    notes = [_source_note(artifact, source) for source in planned.sources]
    probability, low, high = (np.full(n, np.nan) for _ in range(3))
    weather_used: list[bool | None] = [None] * n
    tokens: list[list[tuple[str, float]]] = [[] for _ in range(n)]
    features, windows = planned_features(artifact, planned, errors)
    if features.height:
        rows = features["window_id"].cast(pl.Int64).to_numpy()
        arrays = artifact.preprocessor.transform(features, windows, ("window_id", "smtdate"))
        inputs = arrays.model_inputs()
        logits = member_logits(artifact.networks, inputs, rows_per_pass)
        members = artifact.calibrator.probabilities(logits, features)
        answer = artifact.calibrator.probabilities(ensemble_logit(logits), features)
        ends = members.min(0), members.max(0)
        if artifact.blend is not None:
            # The mix rises with each part's answer: the band's ends stay its ends.
            tree = artifact.blend.tree_answers(arrays, features)
            answer = mix(answer, tree, artifact.blend.weight)
            ends = tuple(mix(end, tree, artifact.blend.weight) for end in ends)
        probability[rows] = answer
        low[rows], high[rows] = ends
        with_weather = ~arrays.weather_missing.all(axis=(1, 2))
        unknown = artifact.preprocessor.unknown_notes_by_row(features)
        calendar = artifact.preprocessor.calendar_notes_by_row(features)
        new_agency = _new_agency_notes(artifact, features)
        for position, row in enumerate(rows):
            weather_used[row] = bool(with_weather[position])
            absent = "" if with_weather[position] else WEATHER_ABSENT_NOTE
            found = [
                notes[row],
                absent,
                *unknown[position],
                *calendar[position],
                new_agency[position],
            ]
            notes[row] = "; ".join(filter(None, found))
        if top_tokens:
            names = (*artifact.preprocessor.inputs.names, *weather_token_names())
            shares = np.mean(
                [token_importance(n, inputs, rows_per_pass) for n in artifact.networks], axis=0
            )
            for position, row in enumerate(rows):
                order = np.argsort(shares[position])[::-1][:top_tokens]
                tokens[row] = [(names[i], float(shares[position, i])) for i in order]
    return Scored(probability, low, high, weather_used, errors, notes, tokens, artifact.parts)


def answers(artifact: ModelArtifact, request: pd.DataFrame, top_tokens: int = 0) -> pd.DataFrame:
    """The registered model's answer to `request`, as its pyfunc returns it (with the
    `top_tokens` that weighed most when asked for)."""
    return score(artifact, request, top_tokens).frame(with_tokens=top_tokens > 0)


def _new_agency_notes(artifact: ModelArtifact, features: pl.DataFrame) -> list[str]:
    """Per row, a note when the model reads the agency's success rate and the records have no
    earlier expedition of that agency (the rate is then the prior)."""
    if "agency_success_rate" not in artifact.preprocessor.inputs.names:
        return [""] * features.height
    known = set(artifact.history["history_agencies"]["agency"].to_list())
    return [
        f"agency {agency!r} has no expedition in the records: its success rate is the prior"
        if agency is not None and agency not in known
        else ""
        for agency in features["agency"].to_list()
    ]


def _source_note(artifact: ModelArtifact, source: str | None) -> str:
    trained_on = artifact.preprocessor.weather_source
    if source is None or source == trained_on:
        return ""
    return f"weather from {source!r}, the model was trained on {trained_on!r}"


def _known_peaks(
    artifact: ModelArtifact, attempts: pl.DataFrame, errors: list[str | None]
) -> pl.DataFrame:
    """The attempts on peaks the model's records know; the others get their error."""
    known = set(artifact.history["history_peak_facts"]["peakid"].to_list())
    for row, peak in attempts.select("row", "peakid").iter_rows():
        if peak not in known:
            errors[row] = f"unknown peak {peak!r}: not in the records the model was trained with"
    return attempts.filter(pl.col("peakid").is_in(sorted(known)))


def _windows(
    con: duckdb.DuckDBPyConnection, attempts: pl.DataFrame, weather: pl.DataFrame
) -> pl.DataFrame:
    """The 26-token windows of each row's own daily weather (the training SQL)."""
    # A day with no value at all is a day without weather (as an absent row is in training).
    has_values = pl.any_horizontal(pl.col(WEATHER_VARIABLES).is_not_null())
    daily = weather.filter(pl.col("row").is_in(attempts["row"].to_list()) & has_values).select(
        pl.col("row").cast(pl.String).alias("peakid"),
        "date",
        pl.lit(REQUEST_SOURCE).alias("source"),
        *WEATHER_VARIABLES,
    )
    con.register("weather_daily", daily)
    targets = attempts.select(
        pl.col("row").cast(pl.String).alias("peakid"), pl.col("smtdate").alias("date")
    )
    return compute_windows(con, targets, REQUEST_SOURCE)


def _complete_windows(
    artifact: ModelArtifact,
    features: pl.DataFrame,
    windows: pl.DataFrame,
    errors: list[str | None],
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The rows whose window misses no more days than the model was trained with, or has no
    weather at all (as an attempt on a peak without weather is trained: weather absent)."""
    allowed = int(artifact.preprocessor.extra.get("max_missing_days", 0))
    missing = windows.group_by("peakid").agg(pl.col("missing_days").max())
    too_many = missing.filter(
        (pl.col("missing_days") > allowed) & (pl.col("missing_days") < WINDOW_DAYS)
    )
    for window_id, days in too_many.iter_rows():
        errors[int(window_id)] = (
            f"weather: {days} of 90 days missing (the model allows {allowed}); "
            "send D-89 … D complete, or no weather at all for an answer without it"
        )
    bad = set(too_many["peakid"].to_list())
    return (
        features.filter(~pl.col("window_id").is_in(sorted(bad))),
        windows.filter(~pl.col("peakid").is_in(sorted(bad))),
    )
