"""The backtest's folds summed up: the held-out member seasons by member, by peak group and by
member group; the expedition-record seasons by expedition; what the transformer's map does;
which models' answers barely move; and the push-day skill.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from deepsummit.backtest.outcome import MODELS, PUSH_DAY_SCORED, WEATHER_MASKED, FoldOutcome
from deepsummit.backtest.push_days import (
    CLIMATOLOGY,
    PEAK_SEASON,
    PushDaySkill,
    climatology,
    daily_scores,
    season_skill,
    summarise,
)
from deepsummit.backtest.seasons import SeasonTable, season_table
from deepsummit.contracts.member_groups import MEMBER_COLUMNS
from deepsummit.core.config import Settings
from deepsummit.core.errors import PipelineError
from deepsummit.core.seasons import season_name
from deepsummit.core.sections import BacktestConfig
from deepsummit.features.groups import PEAK_GROUPS, peak_groups
from deepsummit.train.bootstrap import Interval, interval, replicate_weights, weighted_ece
from deepsummit.train.comparison import TRANSFORMER, flat_answer, slug
from deepsummit.train.evaluation import WITHOUT_MAP
from deepsummit.train.expeditions import ExpeditionTable, expedition_table
from deepsummit.train.member_groups import ALL_PEAKS, GroupCalibration, calibration_by_scope

logger = logging.getLogger(__name__)

PUSH_DAY_MODELS = (TRANSFORMER, WEATHER_MASKED, CLIMATOLOGY, *PUSH_DAY_SCORED[2:])
# The transformer's answer and its own probabilities beside the baselines: what the map does.
JUDGED = (*MODELS, WITHOUT_MAP)


@dataclass(frozen=True)
class BacktestReport:
    directory: Path
    folds: tuple[FoldOutcome, ...]
    held_out: pl.DataFrame  # every trained fold's test rows, as FoldOutcome.held_out
    seasons: SeasonTable  # the members file's seasons, member by member
    groups: dict[str, SeasonTable]  # the same table for each peak group's held-out rows
    member_groups: dict[str, GroupCalibration]  # the member seasons by member group, per scope
    expeditions: ExpeditionTable  # the expedition records' seasons, expedition by expedition
    ece: dict[str, Interval]  # per model (and without the map), member seasons
    flags: dict[str, str]  # per model: why its answer is no skill ("" when it is)
    push_days: PushDaySkill
    daily: pl.DataFrame  # per held-out peak-season and day: summiters and each model's score
    seed_spread: float  # mean over held-out rows of the members' band width (as served)

    def metrics(self) -> dict[str, float]:
        return {
            **self.seasons.metrics(),
            **{
                k: v
                for group, table in self.groups.items()
                for k, v in table.metrics(f"backtest_{slug(group)}_").items()
            },
            **self.member_groups[ALL_PEAKS].metrics("backtest_member_seasons_"),
            **self.expeditions.metrics("backtest_expeditions_"),
            **{
                k: v
                for m, e in self.ece.items()
                for k, v in e.as_dict(f"backtest_{slug(m)}_ece").items()
            },
            **{f"backtest_{slug(m)}_flat": float(bool(flag)) for m, flag in self.flags.items()},
            **self.push_days.metrics(),
            "backtest_seed_spread": self.seed_spread,
            "backtest_folds_skipped": sum(1 for f in self.folds if f.skipped),
        }


def summarise_folds(
    settings: Settings,
    directory: Path,
    outcomes: tuple[FoldOutcome, ...],
    features: pl.DataFrame,
    seasons: pl.DataFrame,
) -> BacktestReport:
    config = settings.backtest
    trained = [o for o in outcomes if not o.skipped]
    if not trained:
        raise PipelineError(
            "backtest: no fold could train: "
            + "; ".join(f"{o.fold.name}: {o.skipped}" for o in outcomes)
        )
    held_out = pl.concat([o.held_out for o in trained]).with_columns(
        pl.col(f"raw_{TRANSFORMER}").alias(WITHOUT_MAP)
    )
    members = held_out.filter(pl.col("record") == "member")
    member_columns = features.select("expid", "member_id", "year", *MEMBER_COLUMNS)
    skill, daily = push_day_skill(trained, features, seasons)
    return BacktestReport(
        directory=directory,
        folds=outcomes,
        held_out=held_out,
        seasons=season_table(members, MODELS, config.min_season_rows, config.disaster_seasons),
        groups=by_peak_group(members, features, config),
        member_groups=calibration_by_scope(
            members.join(member_columns, on=["expid", "member_id", "year"], how="left"),
            {m: members[m].to_numpy() for m in JUDGED},
            config.min_group_members,
            config.separate_peaks,
        ),
        expeditions=expedition_table(
            held_out.filter(pl.col("record") == "expedition"),
            JUDGED,
            config.min_season_expeditions,
            config.unscored_seasons,
        ),
        ece=member_ece(members),
        flags=flags(held_out),
        push_days=skill,
        daily=daily,
        seed_spread=float(held_out["seed_spread"].mean()),
    )


def by_peak_group(
    members: pl.DataFrame, features: pl.DataFrame, config: BacktestConfig
) -> dict[str, SeasonTable]:
    """The member seasons' table for each peak group's held-out rows on their own."""
    grouped = members.join(peak_groups(features), on="peakid", how="left")
    return {
        group: season_table(
            grouped.filter(pl.col("group") == group),
            MODELS,
            config.min_season_rows,
            config.disaster_seasons,
        )
        for group in PEAK_GROUPS
    }


def member_ece(members: pl.DataFrame) -> dict[str, Interval]:
    """Each model's ECE on the member seasons' held-out rows, with its expedition-bootstrap
    interval (the transformer with and without its map)."""
    labels = members["label"].cast(pl.Float64).to_numpy()
    replicates = replicate_weights(
        members.select(pl.format("{}/{}", "expid", "year")).to_series().to_numpy()
    )
    ones = np.ones((1, len(labels)))
    return {
        m: interval(
            weighted_ece(labels, members[m].to_numpy(), ones)[0],
            weighted_ece(labels, members[m].to_numpy(), replicates),
        )
        for m in JUDGED
    }


def flags(held_out: pl.DataFrame) -> dict[str, str]:
    """Per model, why its held-out answer is no skill (deepsummit/train/comparison.py)."""
    seasons = held_out.select(season_name(pl.col("year"), pl.col("season"))).to_series()
    return {m: flat_answer(held_out[m].to_numpy(), seasons.to_numpy()) for m in MODELS}


def push_day_skill(
    trained: list[FoldOutcome], features: pl.DataFrame, seasons: pl.DataFrame
) -> tuple[PushDaySkill, pl.DataFrame]:
    """Each held-out peak-season's days ranked by every model and by the climatology."""
    candidates = pl.concat([o.push_days for o in trained if o.push_days.height])
    scored = daily_scores(candidates, features, PUSH_DAY_SCORED)
    skills, daily = [], []
    for key in seasons.select(PEAK_SEASON).iter_rows():
        days = scored.filter(pl.struct(PEAK_SEASON) == dict(zip(PEAK_SEASON, key, strict=True)))
        if days.height < 2:
            logger.warning("push days: %s has %d scored days; skipped", key, days.height)
            continue
        days = days.with_columns(
            pl.Series(CLIMATOLOGY, climatology(features, key, days["smtdate"]))
        )
        skills.append(season_skill(days, PUSH_DAY_MODELS, key))
        daily.append(days)
    return summarise(skills, PUSH_DAY_MODELS), pl.concat(daily)
