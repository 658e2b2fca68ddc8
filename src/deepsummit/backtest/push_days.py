"""Push-day skill: across a held-out season's days, does the model's P follow the days people
actually summited, and did the pushes on the days it rates higher succeed more often?

For each held-out peak-season with enough summiters, the season's real members (as recorded:
their team, their plan, their base-camp arrival) are scored on every day from the season's
first to its last recorded push date, with the weather of that day's 90-day window from the
archive. The archive stands in for a perfect forecast: this measures whether the model reads
good days from the weather it is given, not how good a forecast is. A model is scored on one
source (the one it was trained on); the product's outlook reads a forecast.

Each day's score is the mean P of the season's members on that day. Against the summiters per
day it gives a Spearman correlation, and a hit when the highest-scored day is a day someone
summited. Both follow the crowd: most summits fall on the days most people push. The decision
the outlook serves is judged apart: within the peak-season, did the pushes made on days the
model rates higher succeed more often than those made on days it rates lower? That is the AUC
of each recorded push's success by its day's score (`decision_auc`; a push is a member on
their expedition's summit date), set against the calendar's own rating of the same days.

The references: the same model with the weather masked, the climatology of summit days (how
many summits each day of the year saw on the peak in that season in earlier years, smoothed),
and the trees on the same rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import duckdb
import numpy as np
import polars as pl
from scipy.stats import spearmanr

from deepsummit.core.inputs import WEATHER_VARIABLES
from deepsummit.features.tabular import attempt_features, register_history
from deepsummit.features.windows import compute_windows
from deepsummit.train.bootstrap import SEED, Interval, interval
from deepsummit.train.comparison import difference_metrics, difference_name, slug

PEAK_SEASON = ("peakid", "year", "season")
CLIMATOLOGY = "climatology"
CLIMATOLOGY_BANDWIDTH_DAYS = 3.0  # Gaussian kernel over the day of year
REPLICATES = 2000


def eligible_peak_seasons(features: pl.DataFrame, years: range, min_summiters: int) -> pl.DataFrame:
    """Peak-seasons of the held-out years, on peaks with weather, with at least
    `min_summiters` summiters among the snapshot's attempts: (peakid, year, season, summiters,
    first_day, last_day). Without weather the model has nothing to rank days by."""
    return (
        features.filter(pl.col("year").is_in(list(years)) & pl.col("has_weather"))
        .group_by(PEAK_SEASON)
        .agg(
            summiters=pl.col("label").sum(),
            first_day=pl.col("smtdate").min(),
            last_day=pl.col("smtdate").max(),
        )
        .filter(pl.col("summiters") >= min_summiters)
        .sort(PEAK_SEASON)
    )


@dataclass(frozen=True)
class Candidates:
    """Every member of the eligible peak-seasons on every candidate day: their tabular features
    as of that day (base-camp days, …) and the windows of the days."""

    features: pl.DataFrame  # features rows with smtdate = the candidate day
    windows: pl.DataFrame


def candidate_attempts(
    warehouse: duckdb.DuckDBPyConnection,
    history: dict[str, pl.DataFrame],
    seasons: pl.DataFrame,
    features: pl.DataFrame,
    weather_source: str,
    prior_strength: float,
) -> Candidates:
    """The candidate rows of `seasons` (eligible_peak_seasons): the warehouse's attempts of the
    snapshot's members, moved to each day of their season's push period."""
    members = features.join(seasons.select(PEAK_SEASON), on=PEAK_SEASON).select(
        "expid", "member_id", "year"
    )
    attempts = (
        warehouse.table("attempts")
        .pl()
        .join(members, on=["expid", "member_id", "year"])
        .join(seasons.select(*PEAK_SEASON, "first_day", "last_day"), on=PEAK_SEASON)
        .with_columns(smtdate=pl.date_ranges("first_day", "last_day"))
        .explode("smtdate")
    )
    days = attempts.select(pl.col("peakid"), pl.col("smtdate").alias("date")).unique()
    weather = (
        warehouse.table("weather_daily")
        .pl()
        .filter(
            (pl.col("source") == weather_source)
            & pl.col("peakid").is_in(seasons["peakid"].unique().to_list())
        )
        .select("peakid", "date", "source", *WEATHER_VARIABLES)
    )
    with duckdb.connect() as con:
        register_history(con, history)
        tabular = attempt_features(con, attempts, prior_strength)
        con.register("weather_daily", weather)
        windows = compute_windows(con, days, weather_source)
    keys = ["expid", "member_id", "year", "smtdate"]
    rows = tabular.join(attempts.select(*keys, "peakid", "season", "label"), on=keys).sort(
        *PEAK_SEASON, "smtdate", "expid", "member_id"
    )
    return Candidates(rows, windows)


def climatology(
    features: pl.DataFrame, peak_season: tuple[str, int, str], days: pl.Series
) -> np.ndarray:
    """Summits on the peak in the same season of earlier years by day of year, smoothed with a
    Gaussian kernel, at each of `days`: where the calendar alone puts the good days."""
    peakid, year, season = peak_season
    earlier = features.filter(
        (pl.col("peakid") == peakid)
        & (pl.col("season") == season)
        & (pl.col("year") < year)
        & (pl.col("label") == 1)
    )
    summit_days = earlier["smtdate"].dt.ordinal_day().to_numpy().astype(np.float64)
    targets = days.dt.ordinal_day().to_numpy().astype(np.float64)
    distance = np.abs(targets[:, None] - summit_days[None, :])
    distance = np.minimum(distance, 365.25 - distance)  # the year is circular
    return np.exp(-0.5 * (distance / CLIMATOLOGY_BANDWIDTH_DAYS) ** 2).sum(axis=1)


@dataclass(frozen=True)
class SeasonSkill:
    peakid: str
    year: int
    season: str
    days: int
    summit_days: int
    summiters: int
    spearman: dict[str, float]  # per model; NaN where a model scores every day the same
    hit: dict[str, bool]  # per model: its best day saw a summit
    # Per model: the AUC of the pushes' success by their day's score; NaN where every push of
    # the season succeeded or every one failed.
    decision: dict[str, float]


def decision_auc(scores: np.ndarray, summiters: np.ndarray, pushes: np.ndarray) -> float:
    """The chance that a push that succeeded fell on a day scored higher than one that failed,
    ties counting half; per day: its score, its summiters and its pushes (summiters included)."""
    failures = pushes - summiters
    if summiters.sum() == 0 or failures.sum() == 0:
        return float("nan")
    above = np.sign(scores[:, None] - scores[None, :]) * 0.5 + 0.5  # 1, ½ on a tie, 0
    return float(summiters @ above @ failures / (summiters.sum() * failures.sum()))


def season_skill(
    daily: pl.DataFrame, models: tuple[str, ...], peak_season: tuple[str, int, str]
) -> SeasonSkill:
    """`daily`: one row per candidate day (smtdate, summiters, pushes, one score column per
    model)."""
    summiters = daily["summiters"].to_numpy().astype(np.float64)
    pushes = daily["pushes"].to_numpy().astype(np.float64)
    spearman, hit, decision = {}, {}, {}
    for model in models:
        scores = daily[model].to_numpy()
        constant = np.ptp(scores) == 0 or np.ptp(summiters) == 0
        spearman[model] = float("nan") if constant else float(spearmanr(scores, summiters)[0])
        hit[model] = bool(summiters[int(np.argmax(scores))] > 0)
        decision[model] = decision_auc(scores, summiters, pushes)
    return SeasonSkill(
        *peak_season,
        days=daily.height,
        summit_days=int((summiters > 0).sum()),
        summiters=int(summiters.sum()),
        spearman=spearman,
        hit=hit,
        decision=decision,
    )


def daily_scores(
    scored: pl.DataFrame, actual: pl.DataFrame, models: tuple[str, ...]
) -> pl.DataFrame:
    """Per peak-season and candidate day: each model's mean P over the members, and the
    pushes and summiters recorded that day (0 on a day nobody pushed)."""
    means = scored.group_by(*PEAK_SEASON, "smtdate").agg(pl.col(m).mean() for m in models)
    recorded = actual.group_by(*PEAK_SEASON, "smtdate").agg(
        pushes=pl.len(), summiters=pl.col("label").cast(pl.Int64).sum()
    )
    return (
        means.join(recorded, on=[*PEAK_SEASON, "smtdate"], how="left")
        .with_columns(pl.col("pushes", "summiters").fill_null(0))
        .sort(*PEAK_SEASON, "smtdate")
    )


@dataclass(frozen=True)
class PushDaySkill:
    models: tuple[str, ...]  # the first is the one the differences are taken from
    seasons: tuple[SeasonSkill, ...]
    mean_spearman: dict[str, Interval]  # over the seasons, bootstrap over seasons
    hit_rate: dict[str, Interval]
    differences: dict[str, Interval]  # first − other, mean Spearman, paired
    # The mean decision AUC over the seasons where every model's is defined, and first − other
    # of it, paired.
    mean_decision: dict[str, Interval]
    decision_differences: dict[str, Interval]

    def metrics(self) -> dict[str, float]:
        values: dict[str, float] = {}
        for name in self.models:
            key = slug(name)
            values |= self.mean_spearman[name].as_dict(f"push_day_{key}_spearman")
            values |= self.hit_rate[name].as_dict(f"push_day_{key}_hit_rate")
            values |= self.mean_decision[name].as_dict(f"push_day_{key}_decision_auc")
        return (
            values
            | difference_metrics(self.differences, "push_day_spearman_difference_")
            | difference_metrics(self.decision_differences, "push_day_decision_auc_difference_")
        )


def summarise(seasons: list[SeasonSkill], models: tuple[str, ...]) -> PushDaySkill:
    """Means over the peak-seasons whose figure every model defines (the Spearman and the hit;
    the decision AUC), with a bootstrap over those seasons (paired: one set of draws for every
    model)."""
    spearman, spearman_gap = _means(seasons, models, lambda s, m: s.spearman[m])
    hits, _ = _means(
        seasons, models, lambda s, m: float(s.hit[m]), defined_by=lambda s, m: s.spearman[m]
    )
    decision, decision_gap = _means(seasons, models, lambda s, m: s.decision[m])
    return PushDaySkill(
        models=models,
        seasons=tuple(seasons),
        mean_spearman=spearman,
        hit_rate=hits,
        differences=spearman_gap,
        mean_decision=decision,
        decision_differences=decision_gap,
    )


def _means(
    seasons: list[SeasonSkill],
    models: tuple[str, ...],
    figure: Callable[[SeasonSkill, str], float],
    defined_by: Callable[[SeasonSkill, str], float] | None = None,
) -> tuple[dict[str, Interval], dict[str, Interval]]:
    """Each model's mean `figure` over the seasons where every model's `defined_by` (the figure
    itself by default) is defined, and the first model's paired differences to the others."""
    defined = defined_by or figure
    usable = [s for s in seasons if not any(np.isnan(defined(s, m)) for m in models)]
    n = len(usable)
    draws = np.random.default_rng(SEED).integers(0, max(n, 1), size=(REPLICATES, n))

    def mean_with_interval(values: np.ndarray) -> Interval:
        if not n:
            return Interval(float("nan"), float("nan"), float("nan"))
        return interval(float(values.mean()), values[draws].mean(axis=1))

    values = {m: np.array([figure(s, m) for s in usable]) for m in models}
    first, *others = models
    return (
        {m: mean_with_interval(values[m]) for m in models},
        {
            difference_name(first, other): mean_with_interval(values[first] - values[other])
            for other in others
        },
    )
