"""The backtest run: every fold answered as the registered model answers (each one cached on
disk), then the season tables (member seasons by member, expedition-record seasons by
expedition), the member groups, what the map does, and the push-day skill.

A fold's files live under `<backtest.output_dir>/<key>/`, the key a digest of the snapshot and
of every setting that changes a fold's result (deepsummit/backtest/cache.py): a rerun on the
same snapshot reads them back and trains nothing, and a run cut short resumes at the first fold
without files (and inside a fold at the transformer's last checkpoint). A member check shared
by several folds (every fold after the members file ends shares the newest one) trains once
and is kept beside the folds; the baselines' answers of a fold are cached apart, under a key of
what they follow from, so candidates that differ in the transformer alone
(bench/studies/which_training_profile.py) share them. A fold that cannot train is reported and
skipped.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from deepsummit.backtest.answers import FoldAnswers
from deepsummit.backtest.cache import (
    fold_directories,
    read_check,
    read_fold,
    trainings_directory,
    write_check,
    write_fold,
)
from deepsummit.backtest.folds import Fold, FoldJob, cannot_train, fold_job, rolling_folds
from deepsummit.backtest.outcome import FoldOutcome, fold_outcome
from deepsummit.backtest.push_days import Candidates, candidate_attempts, eligible_peak_seasons
from deepsummit.backtest.summary import BacktestReport, summarise_folds
from deepsummit.contracts.preprocessing import Preprocessor
from deepsummit.contracts.snapshot import (
    PREPROCESSING_FILE,
    load_history,
    read_features,
    read_windows,
)
from deepsummit.core.config import Settings
from deepsummit.core.context import Progress, no_progress
from deepsummit.core.seasons import newest_season
from deepsummit.core.warehouse import connect
from deepsummit.train.recipe import Recipe, member_check, refit_arrays

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Snapshot:
    """A features snapshot as the backtest reads it: its rows, windows, the preprocessing every
    fold's own keeps the settings of, and the push-day seasons of the folds' years."""

    features: pl.DataFrame
    windows: pl.DataFrame
    template: Preprocessor  # with the settings' input set
    seasons: pl.DataFrame  # eligible push-day peak-seasons (deepsummit/backtest/push_days.py)

    @classmethod
    def read(cls, settings: Settings, directory: Path, years: range) -> Snapshot:
        features = read_features(directory)
        template = dataclasses.replace(
            Preprocessor.load(directory / PREPROCESSING_FILE),
            inputs=settings.features.model_inputs(),
        )
        seasons = eligible_peak_seasons(features, years, settings.backtest.push_day_min_summiters)
        return cls(features, read_windows(directory), template, seasons)


def last_test_year(settings: Settings, features: pl.DataFrame) -> int:
    return settings.backtest.last_test_year or int(features["year"].max())


def missing_folds(settings: Settings, snapshot: Path) -> list[Fold]:
    """The folds of these settings not yet trained (no files in their cache)."""
    directory, _ = fold_directories(settings, snapshot)
    last = last_test_year(settings, read_features(snapshot))
    return [f for f in rolling_folds(settings.backtest, last) if read_fold(directory, f) is None]


def run_backtest(
    settings: Settings, snapshot: Path, progress: Progress = no_progress
) -> BacktestReport:
    directory, baselines = fold_directories(settings, snapshot)
    directory.mkdir(parents=True, exist_ok=True)
    features = read_features(snapshot)
    last = last_test_year(settings, features)
    folds = rolling_folds(settings.backtest, last)
    data = Snapshot.read(settings, snapshot, range(settings.backtest.first_test_year, last + 1))
    candidates = None
    outcomes = []
    for done, fold in enumerate(folds):
        progress(done, len(folds), f"fold {fold.name} ({fold.describe()})")
        outcome = read_fold(directory, fold)
        reason = cannot_train(fold, data.features, Recipe.of(settings))
        if outcome is None and reason:
            outcome = FoldOutcome(fold, None, None, {"skipped": reason}, cached=False)
            write_fold(directory, outcome)
        elif outcome is None:
            if candidates is None:  # only a fold that trains needs them
                candidates = push_day_candidates(settings, snapshot, data)
            job = _job(settings, fold, data, candidates)
            outcome = train_fold(settings, job, trainings_directory(settings, snapshot), baselines)
            write_fold(directory, outcome)
        outcomes.append(outcome)
        logger.info("backtest fold %s: %s", fold.name, outcome.skipped or "done")
    progress(len(folds), len(folds), "folds done")
    return summarise_folds(settings, directory, tuple(outcomes), features, data.seasons)


def fold_jobs(settings: Settings, snapshot: Path, years: list[int]) -> Iterator[FoldJob]:
    """The jobs of the folds testing `years` that can train, as `run_backtest` builds them: for
    a fold trained elsewhere (bench/gpu.py) and for its answers' assembly here."""
    data = Snapshot.read(settings, snapshot, range(min(years), max(years) + 1))
    candidates = push_day_candidates(settings, snapshot, data)
    for year in years:
        if cannot_train(Fold(year), data.features, Recipe.of(settings)) is None:
            yield _job(settings, Fold(year), data, candidates)


def push_day_candidates(settings: Settings, snapshot: Path, data: Snapshot) -> Candidates:
    with connect(settings.paths.warehouse, read_only=True) as warehouse:
        return candidate_attempts(
            warehouse,
            load_history(snapshot),
            data.seasons,
            data.features,
            data.template.weather_source,
            float(data.template.extra.get("success_rate_prior_strength", 0.0)),
        )


def _job(settings: Settings, fold: Fold, data: Snapshot, candidates: Candidates) -> FoldJob:
    return fold_job(
        fold,
        Recipe.of(settings),
        data.features,
        data.windows,
        data.template,
        _push_day_rows(fold, candidates, data.template),
        candidates.windows,
    )


def train_fold(settings: Settings, job: FoldJob, trainings: Path, baselines: Path) -> FoldOutcome:
    """Train and score one fold: the member check (read back when an earlier fold trained it),
    the recipe trained on every season before the test year (resumed from its checkpoint under
    `trainings`: a fold trained for another map trains no further), the baselines on the same
    rows."""
    started = time.perf_counter()
    recipe = Recipe.of(settings)
    checkpoints = trainings / "checkpoints" / job.fold.name
    check = read_check(trainings, job.check)
    if check is None:
        check = member_check(recipe, job.check, checkpoints / "member-check")
        write_check(trainings, check)
    served = refit_arrays(
        recipe,
        job.arrays["train"],
        job.preprocessor,
        newest_season(job.before),
        check.epochs(recipe.training),
        checkpoints / "served",
    )
    answers = FoldAnswers.of(
        check.logits, check.trainings, served.results, job.arrays["test"], job.day_arrays
    )
    return fold_outcome(settings, job, answers, baselines, time.perf_counter() - started)


def _push_day_rows(fold: Fold, candidates: Candidates, template: Preprocessor) -> pl.DataFrame:
    """The fold's test-year push-day candidate rows (features rows, one per member and
    candidate day) whose windows are complete."""
    allowed = int(template.extra.get("max_missing_days", 0))
    complete = candidates.windows.group_by("peakid", "date").agg(pl.col("missing_days").max())
    complete = complete.filter(pl.col("missing_days") <= allowed).select("peakid", smtdate="date")
    return candidates.features.filter(pl.col("year") == fold.test_year).join(
        complete, on=["peakid", "smtdate"], maintain_order="left"
    )
