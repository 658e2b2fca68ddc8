"""Input drift of the model's inputs: a snapshot's training split as the reference (saved in the
snapshot and frozen into the model trained on it), and the newest attempts or a planned outlook
compared with the champion's reference (deepsummit/contracts/drift.py does the statistics).

Tabular inputs are compared one row per attempt: numbers as numbers, categories and binaries as
categories. `season` is left out: one season against all seasons differs by construction. The
weather is compared one row per attempt and window token, one column per channel.
"""

from __future__ import annotations

import polars as pl

from deepsummit.contracts.drift import DistributionProfile, DriftReport, compare, profile
from deepsummit.contracts.preprocessing import WINDOW_KEY
from deepsummit.core.inputs import WEATHER_CHANNELS, InputSet

NOT_COMPARED = frozenset({"season"})
# Seasons in time order within a year (deepsummit/sql/features_history.sql ranks them the same way).
SEASON_ORDER = {"Spring": 0, "Summer": 1, "Autumn": 2, "Winter": 3}
FEATURE_WINDOW_KEY = ("peakid", "smtdate")


def _tabular(rows: pl.DataFrame, inputs: InputSet) -> tuple[pl.DataFrame, list[str], list[str]]:
    numeric = [n for n in inputs.numeric if n not in NOT_COMPARED]
    categorical = [n for n in (*inputs.categorical, *inputs.binary) if n not in NOT_COMPARED]
    frame = rows.select(pl.col(numeric).cast(pl.Float64), pl.col(categorical).cast(pl.String))
    return frame, numeric, categorical


def _weather(rows: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """One row per attempt and token of its window (an attempt's weather counts once per
    member, as the model sees it)."""
    keyed = windows.rename(dict(zip(WINDOW_KEY, FEATURE_WINDOW_KEY, strict=True)))
    return (
        rows.select(FEATURE_WINDOW_KEY)
        .join(keyed, on=list(FEATURE_WINDOW_KEY))
        .select(WEATHER_CHANNELS)
    )


def training_profile(
    train: pl.DataFrame, windows: pl.DataFrame, inputs: InputSet, description: str
) -> DistributionProfile:
    """The reference a model carries: its training rows' inputs and their weather."""
    frame, numeric, categorical = _tabular(train, inputs)
    tabular = profile(frame, numeric, categorical, description=description)
    weather = profile(_weather(train, windows), WEATHER_CHANNELS, [], description=description)
    return tabular.merged(weather)


def weather_drift(
    reference: DistributionProfile,
    rows: pl.DataFrame,
    windows: pl.DataFrame,
    threshold: float,
    min_rows: int,
    description: str,
) -> DriftReport:
    """The weather tokens of `rows` (one per attempt and token) against `reference`."""
    known = set(reference.features)
    return compare(
        reference,
        _weather(rows, windows),
        threshold,
        features=[n for n in WEATHER_CHANNELS if n in known],
        min_rows=min_rows,
        description=description,
    )


def input_drift(
    reference: DistributionProfile,
    rows: pl.DataFrame,
    windows: pl.DataFrame,
    inputs: InputSet,
    threshold: float,
    min_rows: int,
    description: str,
) -> DriftReport:
    """`rows` (with their windows) against `reference`, on the inputs both share."""
    frame, numeric, categorical = _tabular(rows, inputs)
    known = set(reference.features)
    tabular = compare(
        reference,
        frame,
        threshold,
        features=[n for n in (*numeric, *categorical) if n in known],
        min_rows=min_rows,
        description=description,
    )
    weather = weather_drift(reference, rows, windows, threshold, min_rows, description)
    return tabular.combined(weather)
