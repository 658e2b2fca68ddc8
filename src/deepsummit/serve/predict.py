"""`deepsummit predict`: a thin client of the registered model.

It states one member's planned push in the model's input layout (deepsummit/serve/planned.py),
adds the 90 days of weather up to the push day from the warehouse, in the source the champion
was trained on, and asks the champion: its artifact, from a local copy checked against the
registered digest, answers through the very function its pyfunc runs (`scoring.answers`), so the
number is the registered model's without MLflow's import or a download on every call. The
features are built inside the model, by the training code, from what the model froze.

Beside the answer it shows what the member changes: the same attempt asked at the start of
every age band (and as the other sex), in the same call; and the member's groups where the
model was least sure on held-out members (the member check the registered version keeps:
deepsummit/contracts/member_groups.py).
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from deepsummit.contracts.artifact import ModelArtifact
from deepsummit.contracts.champion import (
    ARTIFACT_PATH,
    TAG_FILES_DIGEST,
    TAG_WEATHER_SOURCE,
    RegisteredVersion,
    champion_version,
    verified_copy,
)
from deepsummit.contracts.member_groups import AGE_BAND_STARTS, member_groups
from deepsummit.core.config import Settings
from deepsummit.core.errors import BadInput
from deepsummit.core.inputs import WEATHER_VARIABLES, WINDOW_DAYS
from deepsummit.core.planned import planned_record, today
from deepsummit.core.warehouse import connect, query
from deepsummit.serve.inference import torch_threads
from deepsummit.serve.planned import parse_planned
from deepsummit.serve.prediction import Prediction
from deepsummit.serve.scoring import score

TOP_TOKENS = 5
LEAST_SURE = 2  # the member's groups named where the model was least sure
# PyTorch's threads while predict asks the model: a request of a few rows gains nothing from a
# second thread, and on a busy machine each forward pass waited for it (0.2 s a pass on two
# shared cores, 2 ms with one thread; the answers are the same to the last bit).
FORWARD_THREADS = 1
_LOADING = threading.Lock()  # champion_artifact's: one download and load at a time


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
    [error] = parse_planned([record]).errors
    if error:
        raise BadInput(error)
    with connect(settings.paths.warehouse, read_only=True) as con:
        # Before the registry is asked: bad input fails at once, naming what is wrong.
        sources = check_known(con, planned, today(settings.weather.timezone))
        # The window of every source the peak has (one or two), while the file is open: the
        # champion, asked next, names the source, and the registry is not asked with the
        # warehouse open, nor the warehouse opened twice (14 ms each time).
        windows = {source: source_window(con, planned, source) for source in sources}
    champion = champion_version(settings.mlflow)
    source = champion.tags.get(TAG_WEATHER_SOURCE, settings.weather.source)
    weather, why_absent = push_weather(planned, source, windows)
    artifact = champion_artifact(settings, champion)

    # The member and each change of the member in one request (the features built once), each
    # row a forward pass of its own: every answer is, to the last bit, the registered model's to
    # that row asked alone (in a batch it may differ by 1e-9), and a pass takes milliseconds.
    changes = member_changes(record)
    rows = [{**row, "weather_source": source, **weather} for row in (record, *changes.values())]
    with torch_threads(FORWARD_THREADS):
        answers = score(artifact, rows, TOP_TOKENS, rows_per_pass=1)
    error = answers.errors[0]
    if error:
        raise BadInput(error)
    return Prediction(
        probability=float(answers.probability[0]),
        low=float(answers.low[0]),
        high=float(answers.high[0]),
        top_tokens=answers.token_text(0),
        notes="; ".join(filter(None, [why_absent, answers.notes[0]])),
        weather_used=bool(answers.weather_used[0]),
        model_uri=f"models:/{champion.name}@{settings.mlflow.champion_alias}",
        model_version=str(champion.version),
        weather_source=source,
        attempt=dict(planned),
        by_member={
            change: float(probability)
            for change, probability in zip(changes, answers.probability[1:], strict=True)
            if not math.isnan(probability)
        },
        least_sure=least_sure(artifact, record),
        answered_by=answers.parts,
    )


def champion_artifact(settings: Settings, champion: RegisteredVersion) -> ModelArtifact:
    """The artifact of `champion`: its local copy, checked against the registered digest, and
    loaded once per process for files of one digest. One thread of a process at a time (the
    scorer answers on several): two first calls at once would each download the files, the
    second replacing the folder the first loads from, and each load the artifact."""
    with _LOADING:
        local = verified_copy(
            settings.mlflow.tracking_uri, champion, settings.mlflow.model_cache_dir
        )
        return loaded_artifact(local / ARTIFACT_PATH, champion.tags[TAG_FILES_DIGEST])


@functools.lru_cache(maxsize=2)
def loaded_artifact(folder: Path, files_digest: str) -> ModelArtifact:
    """The artifact in `folder`, loaded once per process for files of one digest: the scorer
    answers every call from the version it loaded (a new champion, or files verified again
    with another digest, are loaded anew), and a `predict` process loads it once."""
    return ModelArtifact.load(folder)


def source_window(
    con: duckdb.DuckDBPyConnection, planned: Mapping[str, Any], source: str
) -> dict[str, list[float | None]] | BadInput:
    """The 90 days of weather up to the push day from `source`, or why they cannot be used
    (raised only if the champion reads that source)."""
    try:
        return daily_weather(con, planned["peak"], planned["push_date"], source)
    except BadInput as error:
        return error


def push_weather(
    planned: Mapping[str, Any],
    source: str,
    windows: Mapping[str, dict[str, list[float | None]] | BadInput],
) -> tuple[dict[str, list[float | None]], str]:
    """The window of `source` among the peak's `windows` (`source_window`'s, by source), and
    why there is none. A peak the source has no weather of is answered as its attempts were
    trained: with the weather absent; a peak it has weather of needs the whole window."""
    if source not in windows:
        return {}, f"no weather of {planned['peak']} in source {source!r}"
    window = windows[source]
    if isinstance(window, BadInput):
        raise window
    return window, ""


def member_changes(record: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The planned attempt with one of the member's own inputs changed, by what changed: the
    start of every age band, and the other sex when one is stated."""
    changes = {f"age {age}": {**record, "age": float(age)} for age in AGE_BAND_STARTS}
    other = {"M": "F", "F": "M"}.get(record.get("sex") or "")
    if other:
        changes[f"as {other}"] = {**record, "sex": other}
    return changes


def least_sure(artifact: ModelArtifact, record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The member's counted groups in the version's member check, furthest from the observed
    rate first (none when the version keeps no member check)."""
    if artifact.member_groups is None:
        return []
    member = pl.DataFrame(
        {
            "age": [record.get("age")],
            "sex": [{"M": 1, "F": 0}.get(record.get("sex") or "")],
            "is_hired": [int(bool(record.get("hired")))],
            "oxygen_planned": [None if record.get("oxygen") is None else int(record["oxygen"])],
            "role": [record.get("role")],
            "nationality": [record.get("nationality")],
        },
        schema_overrides={"age": pl.Float64, "sex": pl.Int32, "oxygen_planned": pl.Int32},
    )
    mine = {(family, group) for family, group in member_groups(member).row(0, named=True).items()}
    model = artifact.member_groups["models"][0]
    found = [
        {
            "family": row["family"],
            "group": row["group"],
            "members": row["members"],
            "observed": row["observed"]["estimate"],
            "mean_probability": row["mean_probability"][model]["estimate"],
            "gap": row["gap"][model]["estimate"],
            "gap_low": row["gap"][model]["low"],
            "gap_high": row["gap"][model]["high"],
        }
        for row in artifact.member_groups["rows"]
        if row["counted"] and (row["family"], row["group"]) in mine
    ]
    return sorted(found, key=lambda g: -abs(g["gap"]))[:LEAST_SURE]
