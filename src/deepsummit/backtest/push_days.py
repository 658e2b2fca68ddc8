"""Push-day skill: across a held-out season's days, does the model's P follow the days people
actually summited?

For each held-out peak-season with enough summiters, the season's real members (as recorded:
their team, their plan, their base-camp arrival) are scored on every day from the season's
first to its last recorded push date, with the weather of that day's 90-day window from the
archive. The archive stands in for a perfect forecast: this measures whether the model reads
good days from the weather it is given, not how good a forecast is. A model is scored on one
source (the one it was trained on); the product's outlook reads a forecast.

Each day's score is the mean P of the season's members on that day. Against the summiters per
day it gives a Spearman correlation, and a hit when the highest-scored day is a day someone
summited. The baselines: the same model with the weather masked, the climatology of summit days
(how many summits each day of the year saw on the peak in that season in earlier years,
smoothed), and LightGBM on the same rows.
"""

from __future__ import annotations

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


def season_skill(
    daily: pl.DataFrame, models: tuple[str, ...], peak_season: tuple[str, int, str]
) -> SeasonSkill:
    """`daily`: one row per candidate day (smtdate, summiters, one score column per model)."""
    summiters = daily["summiters"].to_numpy().astype(np.float64)
    spearman, hit = {}, {}
    for model in models:
        scores = daily[model].to_numpy()
        constant = np.ptp(scores) == 0 or np.ptp(summiters) == 0
        spearman[model] = float("nan") if constant else float(spearmanr(scores, summiters)[0])
        hit[model] = bool(summiters[int(np.argmax(scores))] > 0)
    return SeasonSkill(
        *peak_season,
        days=daily.height,
        summit_days=int((summiters > 0).sum()),
        summiters=int(summiters.sum()),
        spearman=spearman,
        hit=hit,
    )


def daily_scores(
    scored: pl.DataFrame, actual: pl.DataFrame, models: tuple[str, ...]
) -> pl.DataFrame:
    """Per peak-season and candidate day: each model's mean P over the members, and the
    summiters recorded that day (0 on a day nobody summited)."""
    means = scored.group_by(*PEAK_SEASON, "smtdate").agg(pl.col(m).mean() for m in models)
    summits = (
        actual.filter(pl.col("label") == 1)
        .group_by(*PEAK_SEASON, "smtdate")
        .agg(summiters=pl.len())
    )
    return (
        means.join(summits, on=[*PEAK_SEASON, "smtdate"], how="left")
        .with_columns(pl.col("summiters").fill_null(0))
        .sort(*PEAK_SEASON, "smtdate")
    )


@dataclass(frozen=True)
class PushDaySkill:
    models: tuple[str, ...]  # the first is the one the differences are taken from
    seasons: tuple[SeasonSkill, ...]
    mean_spearman: dict[str, Interval]  # over the seasons, bootstrap over seasons
    hit_rate: dict[str, Interval]
    differences: dict[str, Interval]  # first − other, mean Spearman, paired

    def metrics(self) -> dict[str, float]:
        values: dict[str, float] = {}
        for name in self.models:
            key = slug(name)
            values |= self.mean_spearman[name].as_dict(f"push_day_{key}_spearman")
            values |= self.hit_rate[name].as_dict(f"push_day_{key}_hit_rate")
        return values | difference_metrics(self.differences, "push_day_spearman_difference_")


def summarise(seasons: list[SeasonSkill], models: tuple[str, ...]) -> PushDaySkill:
    """Means over the peak-seasons whose Spearman every model defines, with a bootstrap over
    those seasons (paired: one set of draws for every model)."""
    usable = [s for s in seasons if not any(np.isnan(v) for v in s.spearman.values())]
    n = len(usable)
    draws = np.random.default_rng(SEED).integers(0, max(n, 1), size=(REPLICATES, n))

    def mean_with_interval(values: np.ndarray) -> Interval:
        if not n:
            return Interval(float("nan"), float("nan"), float("nan"))
        return interval(float(values.mean()), values[draws].mean(axis=1))

    spearman = {m: np.array([s.spearman[m] for s in usable]) for m in models}
    hits = {m: np.array([float(s.hit[m]) for s in usable]) for m in models}
    first, *others = models
    return PushDaySkill(
        models=models,
        seasons=tuple(seasons),
        mean_spearman={m: mean_with_interval(spearman[m]) for m in models},
        hit_rate={m: mean_with_interval(hits[m]) for m in models},
        differences={
            difference_name(first, other): mean_with_interval(spearman[first] - spearman[other])
            for other in others
        },
    )
