"""Held-out seasons judged per expedition: what the records of an expedition without member rows
can say.

Such a record (Autumn 2019 on, in the bundle) gives how many of its climbing members summited,
not which: its attempts are alike but for the label, so every model gives them one probability.
Its seasons are therefore judged by expedition:

- AUC within the season of the expedition's success (any member summited) by its P;
- Brier score of the team's summit fraction (summiters / members) by its P, per expedition;
- calibration: per season, the gap between the mean P over the members and the members' summit
  fraction (both member-weighted), and the mean of those gaps over the seasons.

A season with fewer expeditions than the minimum, or listed in `unscored` (e.g. 2020, the
pandemic), is listed, not scored. Intervals come from one bootstrap over expeditions: every
replicate recomputes each season's figures and their means, and a paired difference of two
models uses the same replicates for both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import polars as pl

from deepsummit.core.seasons import POSITION
from deepsummit.train.bootstrap import Interval, interval, replicate_weights, weighted_auc
from deepsummit.train.comparison import difference_metrics, difference_name, slug

SEASON = ("year", "season")
FIGURES = ("auc", "brier", "gap")


@dataclass(frozen=True)
class ExpeditionSeason:
    season: str  # "2023 Spring"
    expeditions: int
    members: int
    summit_fraction: float  # the members'
    auc: dict[str, Interval]  # per model; empty when the season is not scored
    brier: dict[str, Interval]
    mean_probability: dict[str, float]  # over the members
    note: str  # why it is not scored ("" otherwise)

    @property
    def scored(self) -> bool:
        return bool(self.auc)


@dataclass(frozen=True)
class ExpeditionTable:
    models: tuple[str, ...]  # the first is the one the differences are taken from
    seasons: tuple[ExpeditionSeason, ...]
    within: dict[str, Interval]  # mean within-season AUC of expedition success
    brier: dict[str, Interval]  # mean over the seasons of the summit fraction's Brier score
    gap: dict[str, Interval]  # mean over the seasons of |mean P − summit fraction|
    differences: dict[str, Interval]  # first − other, mean within-season AUC

    @property
    def scored_seasons(self) -> int:
        return sum(1 for season in self.seasons if season.scored)

    def metrics(self, prefix: str) -> dict[str, float]:
        values: dict[str, float] = {}
        for name in self.models:
            key = f"{prefix}{slug(name)}"
            values |= self.within[name].as_dict(f"{key}_within_season_auc")
            values |= self.brier[name].as_dict(f"{key}_fraction_brier")
            values |= self.gap[name].as_dict(f"{key}_mean_p_gap")
        return values | difference_metrics(
            self.differences, f"{prefix}within_season_auc_difference_"
        )

    def markdown(self) -> str:
        lines = [
            "| model | mean within-season AUC (expedition success) | summit fraction Brier "
            "| mean P − summit fraction, mean gap |",
            "| --- | --- | --- | --- |",
            *(
                f"| {m} | {self.within[m].render()} | {self.brier[m].render()} "
                f"| {self.gap[m].render()} |"
                for m in self.models
            ),
            "",
            *(f"- {name}: {diff.render(4)} (paired)" for name, diff in self.differences.items()),
            "",
            "| season | expeditions | members | summit fraction | "
            + " | ".join(f"{m} AUC | {m} mean P" for m in self.models)
            + " | note |",
            "| --- | ---: | ---: | ---: | "
            + " | ".join("--- | ---:" for _ in self.models)
            + " | --- |",
        ]
        for s in self.seasons:
            cells = " | ".join(
                f"{s.auc[m].render() if s.scored else '–'} | {s.mean_probability[m]:.3f}"
                for m in self.models
            )
            lines.append(
                f"| {s.season} | {s.expeditions:,} | {s.members:,} | {s.summit_fraction:.3f} "
                f"| {cells} | {s.note} |"
            )
        return "\n".join(lines) + "\n"


def _figures(
    success: np.ndarray,
    fraction: np.ndarray,
    members: np.ndarray,
    probability: np.ndarray,
    weights: np.ndarray,
) -> dict[str, np.ndarray]:
    """One season's AUC of expedition success, Brier score of the summit fraction and the
    member-weighted gap between mean P and summit fraction: one value per row of `weights`
    (replicates × expeditions)."""
    p = probability
    return {
        "auc": weighted_auc(success, p, weights),
        "brier": (weights * (p - fraction) ** 2).sum(1) / weights.sum(1),
        "gap": np.abs((weights * members * (p - fraction)).sum(1) / (weights * members).sum(1)),
    }


def _season_figures(
    season: tuple[np.ndarray, np.ndarray, np.ndarray], p: np.ndarray, weights: np.ndarray
) -> dict[str, tuple[float, np.ndarray]]:
    """One season's figures (`season`: its expeditions' success, summit fraction and members),
    each as drawn and per replicate of `weights`."""
    points = _figures(*season, p, np.ones((1, len(p))))
    replicates = _figures(*season, p, weights)
    return {name: (points[name][0], replicates[name]) for name in FIGURES}


def _member_weighted(
    teams: pl.DataFrame, models: tuple[str, ...], rows: np.ndarray, members: np.ndarray
) -> dict[str, float]:
    """Each model's mean P over the members of the expeditions `rows`."""
    return {m: float(np.average(teams[m].to_numpy()[rows], weights=members[rows])) for m in models}


def _not_scored(unscored: str, success: np.ndarray, min_expeditions: int) -> str:
    """Why a season is only listed ("" when it is scored)."""
    if unscored:
        return f"not scored: {unscored}"
    if len(success) < min_expeditions:
        return f"not scored: {len(success)} expeditions (fewer than {min_expeditions})"
    if success.all() or not success.any():
        return "not scored: one outcome only"
    return ""


def _mean_over_seasons(
    parts: list[tuple[float, np.ndarray]], replicates: int
) -> tuple[float, np.ndarray]:
    """The mean of the scored seasons' figure, as drawn and per replicate."""
    if not parts:  # no season could be scored: no figure, never a silent zero
        return float("nan"), np.full(replicates, np.nan)
    return (
        float(np.mean([point for point, _ in parts])),
        np.nanmean([drawn for _, drawn in parts], axis=0),
    )


def by_expedition(rows: pl.DataFrame, models: tuple[str, ...]) -> pl.DataFrame:
    """Member rows (expid, year, season, label and one probability column per model) → one row
    per expedition: members, summiters, success, and each model's mean probability."""
    return (
        rows.group_by("expid", *SEASON)
        .agg(
            members=pl.len(),
            summiters=pl.col("label").cast(pl.Float64).sum(),
            **{model: pl.col(model).mean() for model in models},
        )
        .with_columns(
            success=pl.col("summiters") > 0,
            order=pl.col("season").replace_strict(POSITION, return_dtype=pl.Int8),
        )
        .sort("year", "order", "expid")  # seasons in time order
        .drop("order")
    )


def expedition_table(
    rows: pl.DataFrame,
    models: tuple[str, ...],
    min_expeditions: int,
    unscored: Mapping[str, str],
) -> ExpeditionTable:
    """`rows`: held-out member rows of expedition records (expid, year, season, label, one
    calibrated probability column per model); `unscored`: season → why it is only listed."""
    teams = by_expedition(rows, models).with_columns(key=pl.format("{} {}", "year", "season"))
    weights = replicate_weights(
        teams.select(pl.format("{}/{}", "expid", "year")).to_series().to_numpy()
    )
    members = teams["members"].to_numpy().astype(np.float64)
    summiters = teams["summiters"].to_numpy()
    success = teams["success"].to_numpy()
    fraction = summiters / members
    replicated: dict[str, dict[str, list]] = {name: {} for name in FIGURES}  # per season
    seasons = []
    for key in teams["key"].unique(maintain_order=True).to_list():
        rows_of = np.flatnonzero(teams["key"].to_numpy() == key)
        note = _not_scored(unscored.get(key, ""), success[rows_of], min_expeditions)
        season = (success[rows_of], fraction[rows_of], members[rows_of])
        auc, brier = {}, {}
        for model in models if not note else ():
            figures = _season_figures(season, teams[model].to_numpy()[rows_of], weights[:, rows_of])
            for name in FIGURES:
                replicated[name].setdefault(model, []).append(figures[name])
            auc[model], brier[model] = interval(*figures["auc"]), interval(*figures["brier"])
        seasons.append(
            ExpeditionSeason(
                season=key,
                expeditions=len(rows_of),
                members=int(members[rows_of].sum()),
                summit_fraction=float(summiters[rows_of].sum() / members[rows_of].sum()),
                auc=auc,
                brier=brier,
                mean_probability=_member_weighted(teams, models, rows_of, members),
                note=note,
            )
        )

    def mean(name: str, model: str) -> tuple[float, np.ndarray]:
        return _mean_over_seasons(replicated[name].get(model, []), len(weights))

    first, *others = models
    return ExpeditionTable(
        models=models,
        seasons=tuple(seasons),
        within={m: interval(*mean("auc", m)) for m in models},
        brier={m: interval(*mean("brier", m)) for m in models},
        gap={m: interval(*mean("gap", m)) for m in models},
        differences={
            difference_name(first, other): interval(
                mean("auc", first)[0] - mean("auc", other)[0],
                mean("auc", first)[1] - mean("auc", other)[1],
            )
            for other in others
        },
    )
