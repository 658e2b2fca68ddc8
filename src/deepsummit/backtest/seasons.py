"""Held-out seasons scored one by one, and the mean within seasons beside the pooled figure.

A pooled AUC over several years rewards ranking years: the test years' summit rates differ,
and a model that knows the year's mood gains without ranking one season's members any better.
So each season (year and season, e.g. "2016 Spring") gets its own AUC, Brier and ECE, and the
models are compared on the mean of the within-season AUCs. Intervals come from one expedition
bootstrap over all held-out rows (deepsummit/train/bootstrap.py): every replicate recomputes
each season's AUC and their mean, and the paired difference of two models uses the same
replicates for both.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import polars as pl

from deepsummit.core.seasons import season_name
from deepsummit.train.bootstrap import (
    Interval,
    MetricIntervals,
    interval,
    metric_intervals,
    replicate_weights,
    weighted_auc,
)
from deepsummit.train.comparison import difference_metrics, difference_name, slug

CALIBRATION_METHODS = ("none", "temperature", "platt", "isotonic")


@dataclass(frozen=True)
class SeasonScore:
    season: str  # "2016 Spring"
    rows: int
    summit_rate: float
    scores: dict[str, MetricIntervals]  # per model; empty when the season is not scored
    note: str  # why it is not scored, or why it is set apart ("" otherwise)

    @property
    def scored(self) -> bool:
        return bool(self.scores)


@dataclass(frozen=True)
class SeasonTable:
    models: tuple[str, ...]  # the first is the one the differences are taken from
    seasons: tuple[SeasonScore, ...]
    within: dict[str, Interval]  # mean within-season AUC over every scored season
    within_ordinary: dict[str, Interval]  # the same without the disaster seasons
    pooled: dict[str, Interval]  # AUC of all held-out rows at once
    differences: dict[str, Interval]  # first − other, mean within-season AUC (ordinary)

    @property
    def scored_seasons(self) -> int:
        return sum(1 for season in self.seasons if season.scored)

    @property
    def rows(self) -> int:
        return sum(season.rows for season in self.seasons)

    def metrics(self, prefix: str = "backtest_") -> dict[str, float]:
        values: dict[str, float] = {}
        for name in self.models:
            key = f"{prefix}{slug(name)}"
            values |= self.within_ordinary[name].as_dict(f"{key}_within_season_auc")
            values |= self.within[name].as_dict(f"{key}_within_season_auc_all")
            values |= self.pooled[name].as_dict(f"{key}_pooled_auc")
        return values | difference_metrics(
            self.differences, f"{prefix}within_season_auc_difference_"
        )


def _within(
    labels: np.ndarray, scores: np.ndarray, groups: list[np.ndarray], weights: np.ndarray
) -> tuple[float, np.ndarray]:
    """The mean of the seasons' AUCs (`groups`: each season's rows), as drawn and per
    replicate of `weights`."""
    if not groups:  # no season could be scored: no figure, never a silent zero
        return float("nan"), np.full(len(weights), np.nan)
    ones = np.ones((1, len(labels)))
    point = np.mean([weighted_auc(labels[r], scores[r], ones[:, r])[0] for r in groups])
    replicates = np.nanmean(
        [weighted_auc(labels[r], scores[r], weights[:, r]) for r in groups], axis=0
    )
    return float(point), replicates


def _season(
    key: str,
    rows: np.ndarray,
    frame: pl.DataFrame,
    labels: np.ndarray,
    weights: np.ndarray,
    models: tuple[str, ...],
    min_rows: int,
) -> SeasonScore:
    """One season's scores, or the note of why it is not scored."""
    season_labels = labels[rows]
    note, scores = "", {}
    if len(rows) < min_rows:
        note = f"not scored: {len(rows)} rows (fewer than {min_rows})"
    elif season_labels.min() == season_labels.max():
        note = "not scored: one outcome only"
    else:
        scores = {
            m: metric_intervals(season_labels, frame[m].to_numpy()[rows], weights[:, rows])
            for m in models
        }
    return SeasonScore(key, len(rows), float(season_labels.mean()), scores, note)


def season_table(
    predictions: pl.DataFrame,
    models: tuple[str, ...],
    min_rows: int,
    disaster_seasons: tuple[str, ...],
) -> SeasonTable:
    """`predictions`: the held-out rows (expid, year, season, label) with one calibrated
    probability column per model."""
    frame = predictions.with_columns(
        season_key=season_name(pl.col("year"), pl.col("season")),
        group=pl.format("{}/{}", "expid", "year"),
    ).sort("year", "season", "expid")
    labels = frame["label"].to_numpy().astype(np.float64)
    weights = replicate_weights(frame["group"].to_numpy())
    seasons, scored_rows, ordinary = [], [], []
    for key in frame["season_key"].unique(maintain_order=True).to_list():
        rows = np.flatnonzero(frame["season_key"].to_numpy() == key)
        season = _season(key, rows, frame, labels, weights, models, min_rows)
        if season.scored:
            scored_rows.append(rows)
            if key in disaster_seasons:
                note = "disaster season: shown, left out of the ordinary mean"
                season = dataclasses.replace(season, note=note)
            else:
                ordinary.append(rows)
        seasons.append(season)
    first, *others = models
    scores = {m: frame[m].to_numpy() for m in models}
    ordinary_parts = {m: _within(labels, scores[m], ordinary, weights) for m in models}
    ones = np.ones((1, len(labels)))
    return SeasonTable(
        models=models,
        seasons=tuple(seasons),
        within={m: interval(*_within(labels, scores[m], scored_rows, weights)) for m in models},
        within_ordinary={m: interval(*ordinary_parts[m]) for m in models},
        pooled={
            m: interval(
                weighted_auc(labels, scores[m], ones)[0],
                weighted_auc(labels, scores[m], weights),
            )
            for m in models
        },
        differences={
            difference_name(first, other): interval(
                ordinary_parts[first][0] - ordinary_parts[other][0],
                ordinary_parts[first][1] - ordinary_parts[other][1],
            )
            for other in others
        },
    )
