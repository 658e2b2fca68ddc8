"""The backtest run: every fold trained and scored (each one cached on disk), then the season
tables (member seasons by member, expedition-record seasons by expedition), the calibration
choice and the push-day skill, written as a report with charts.

A fold's files live under `<backtest.output_dir>/<key>/`, the key a digest of the snapshot and
of every setting that changes a fold's result: a rerun on the same snapshot reads them back and
trains nothing, and a run cut short resumes at the first fold without files (and inside a fold
at the transformer's last checkpoint). The baselines' scores of a fold are cached apart, under
a key of what they follow from (`baselines_key`), so candidates that differ in the transformer
alone (bench/backtest_profiles.py) share them. A fold that cannot train is reported and skipped.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from deepsummit.backtest.answers import FoldAnswers
from deepsummit.backtest.folds import Fold, FoldInputs, fold_inputs, rolling_folds
from deepsummit.backtest.push_days import (
    CLIMATOLOGY,
    PEAK_SEASON,
    Candidates,
    PushDaySkill,
    candidate_attempts,
    climatology,
    daily_scores,
    eligible_peak_seasons,
    season_skill,
    summarise,
)
from deepsummit.backtest.seasons import (
    CalibrationChoice,
    SeasonTable,
    choose_calibration,
    season_table,
)
from deepsummit.contracts.arrays import FeatureArrays, ensemble_probability
from deepsummit.contracts.calibration import Calibrator
from deepsummit.contracts.preprocessing import Preprocessor
from deepsummit.contracts.snapshot import (
    PREPROCESSING_FILE,
    load_history,
    read_features,
    read_windows,
)
from deepsummit.core.config import Settings, TrainConfig
from deepsummit.core.context import Progress, no_progress
from deepsummit.core.errors import PipelineError
from deepsummit.core.warehouse import connect
from deepsummit.features.groups import PEAK_GROUPS, peak_groups
from deepsummit.train.baselines import CATBOOST, LIGHTGBM, LOGISTIC, configured_baselines
from deepsummit.train.comparison import TRANSFORMER, logit, slug
from deepsummit.train.expeditions import ExpeditionTable, expedition_table
from deepsummit.train.recipe import Recipe, kept_epochs, refit, train_seeds, with_recency
from deepsummit.train.trainer import training_knobs

logger = logging.getLogger(__name__)

MODELS = (TRANSFORMER, LIGHTGBM, CATBOOST, LOGISTIC)
BASELINES = (LOGISTIC, LIGHTGBM, CATBOOST)
NO_WEATHER = "transformer, weather masked"
PUSH_DAY_SCORED = (TRANSFORMER, NO_WEATHER, LIGHTGBM, CATBOOST)  # scored on the candidate days
PUSH_DAY_MODELS = (TRANSFORMER, NO_WEATHER, CLIMATOLOGY, LIGHTGBM, CATBOOST)
HELD_OUT_KEYS = ("expid", "member_id", "year", "season", "peakid", "record", "label")


@dataclass(frozen=True)
class FoldOutcome:
    fold: Fold
    held_out: pl.DataFrame | None  # the test year's rows: raw_<model>, <model>, seed_spread
    push_days: pl.DataFrame | None  # candidate rows: peak-season, smtdate, P per model
    summary: dict  # rows per part, seconds, epochs; or the reason it was skipped
    cached: bool

    @property
    def skipped(self) -> str | None:
        return self.summary.get("skipped")


@dataclass(frozen=True)
class BacktestReport:
    directory: Path
    folds: tuple[FoldOutcome, ...]
    held_out: pl.DataFrame  # every trained fold's test rows, as FoldOutcome.held_out
    seasons: SeasonTable  # the members file's seasons, member by member
    groups: dict[str, SeasonTable]  # the same table for each peak group's held-out rows
    expeditions: ExpeditionTable  # the expedition records' seasons, expedition by expedition
    calibration: CalibrationChoice
    push_days: PushDaySkill
    daily: pl.DataFrame  # per held-out peak-season and day: summiters and each model's score
    seed_spread: float  # mean over held-out rows of the seeds' band width (calibrated)

    def metrics(self) -> dict[str, float]:
        return {
            **self.seasons.metrics(),
            **{
                k: v
                for group, table in self.groups.items()
                for k, v in table.metrics(f"backtest_{slug(group)}_").items()
            },
            **self.expeditions.metrics("backtest_expeditions_"),
            **self.push_days.metrics(),
            "backtest_seed_spread": self.seed_spread,
            "backtest_calibration_ece_chosen": self.calibration.ece[self.calibration.chosen],
            "backtest_folds_skipped": sum(1 for f in self.folds if f.skipped),
        }


def _digest(document: dict) -> str:
    text = json.dumps(document, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def baselines_key(settings: Settings, snapshot: Path) -> str:
    """What a fold's baselines follow from: the snapshot's content, the input set, the folds,
    and the training settings the baselines read (seed, slice, row weights)."""
    preprocessing = json.loads((snapshot / PREPROCESSING_FILE).read_text())
    return _digest(
        {
            "snapshot": preprocessing["extra"]["snapshot_digest"],
            "inputs": settings.features.model_inputs().names,
            "train": settings.train.model_dump(
                mode="json", include={"seed", "max_train_rows", "recency_half_life"}
            ),
            "folds": settings.backtest.model_dump(
                mode="json", include={"validation_years", "push_day_min_summiters"}
            ),
        }
    )


def backtest_key(settings: Settings, snapshot: Path) -> str:
    """What a fold's result follows from: the baselines' key, and the settings that train the
    transformer (not where files go)."""
    return _digest(
        {
            "baselines": baselines_key(settings, snapshot),
            "model": dataclasses.asdict(settings.model),
            "train": training_knobs(settings.train),
            "refit": settings.backtest.refit,
        }
    )


def fold_directories(settings: Settings, snapshot: Path) -> tuple[Path, Path]:
    """Where the folds of these settings are cached, and where their baselines' scores are."""
    output = settings.backtest.output_dir
    return (
        output / backtest_key(settings, snapshot),
        output / "baselines" / baselines_key(settings, snapshot),
    )


def missing_folds(settings: Settings, snapshot: Path) -> list[Fold]:
    """The folds of these settings not yet trained (no files in their cache)."""
    directory, _ = fold_directories(settings, snapshot)
    last = settings.backtest.last_test_year or int(read_features(snapshot)["year"].max())
    return [
        fold
        for fold in rolling_folds(settings.backtest, last)
        if not _fold_files(directory, fold)["summary"].exists()
    ]


def run_backtest(
    settings: Settings, snapshot: Path, progress: Progress = no_progress
) -> BacktestReport:
    config = settings.backtest
    directory, baselines = fold_directories(settings, snapshot)
    directory.mkdir(parents=True, exist_ok=True)
    features, windows = read_features(snapshot), read_windows(snapshot)
    template = Preprocessor.load(snapshot / PREPROCESSING_FILE)
    last = config.last_test_year or int(features["year"].max())
    folds = rolling_folds(config, last)
    seasons = eligible_peak_seasons(
        features, range(config.first_test_year, last + 1), config.push_day_min_summiters
    )
    candidates = None
    outcomes = []
    for done, fold in enumerate(folds):
        progress(done, len(folds), f"fold {fold.name} ({fold.describe()})")
        outcome = read_fold(directory, fold)
        if outcome is None:
            if candidates is None:  # only a fold that trains needs them
                candidates = _candidates(settings, snapshot, seasons, features, template)
            inputs = fold_inputs(
                fold, features, windows, template, settings.features.model_inputs()
            )
            outcome = _run_fold(settings, inputs, windows, candidates, template, baselines)
            write_fold(directory, outcome)
        outcomes.append(outcome)
        logger.info("backtest fold %s: %s", fold.name, outcome.skipped or "done")
    progress(len(folds), len(folds), "folds done")
    return _report(settings, directory, tuple(outcomes), features, seasons)


def _candidates(
    settings: Settings,
    snapshot: Path,
    seasons: pl.DataFrame,
    features: pl.DataFrame,
    template: Preprocessor,
) -> Candidates:
    with connect(settings.paths.warehouse, read_only=True) as warehouse:
        return candidate_attempts(
            warehouse,
            load_history(snapshot),
            seasons,
            features,
            template.weather_source,
            float(template.extra.get("success_rate_prior_strength", 0.0)),
        )


@dataclass(frozen=True)
class Scores:
    """One model's uncalibrated probabilities on a fold: its validation and test rows, and the
    push-day candidate rows of its test year."""

    validation: np.ndarray
    test: np.ndarray
    push_days: np.ndarray


@dataclass(frozen=True)
class FoldJob:
    """What a fold's transformer trains and answers on: the fold's arrays (the training rows
    weighted by recency) and its test year's push-day candidates."""

    inputs: FoldInputs
    arrays: dict[str, FeatureArrays]
    day_rows: pl.DataFrame  # one per member and candidate day whose window is complete
    day_arrays: FeatureArrays


def fold_jobs(settings: Settings, snapshot: Path, years: list[int]) -> Iterator[FoldJob]:
    """The jobs of the folds testing `years` that can train, as `run_backtest` builds them: for
    a fold trained elsewhere (bench/gpu.py) and for its answers' assembly here."""
    features, windows = read_features(snapshot), read_windows(snapshot)
    template = Preprocessor.load(snapshot / PREPROCESSING_FILE)
    seasons = eligible_peak_seasons(features, years, settings.backtest.push_day_min_summiters)
    candidates = _candidates(settings, snapshot, seasons, features, template)
    inputs_set = settings.features.model_inputs()
    for year in years:
        inputs = fold_inputs(
            Fold(year, settings.backtest.validation_years), features, windows, template, inputs_set
        )
        if _cannot_train(inputs) is None:
            yield _fold_job(settings, inputs, candidates, template)


def _fold_job(
    settings: Settings, inputs: FoldInputs, candidates: Candidates, template: Preprocessor
) -> FoldJob:
    years = inputs.rows["train"]["year"].to_numpy()
    arrays = {**inputs.arrays, "train": with_recency(inputs.arrays["train"], years, settings.train)}
    day_rows = _push_day_rows(inputs, candidates, template)
    return FoldJob(
        inputs, arrays, day_rows, inputs.preprocessor.transform(day_rows, candidates.windows)
    )


def _run_fold(
    settings: Settings,
    inputs: FoldInputs,
    windows: pl.DataFrame,
    candidates: Candidates,
    template: Preprocessor,
    baselines: Path,
) -> FoldOutcome:
    """Train and score one fold. The transformer is judged as the train stage judges it: the
    map fitted on its validation rows; with `backtest.refit` its test rows and push days are
    answered, as the registered model answers, by the same recipe refit on the fold's every
    season (train and validation)."""
    started = time.perf_counter()
    reason = _cannot_train(inputs)
    if reason:
        sizes = {part: len(a) for part, a in inputs.arrays.items()}
        return FoldOutcome(inputs.fold, None, None, {"rows": sizes, "skipped": reason}, False)
    job = _fold_job(settings, inputs, candidates, template)
    checkpoints = settings.backtest.output_dir / "checkpoints" / inputs.fold.name
    recipe = Recipe.of(settings)
    evaluation = train_seeds(
        recipe, job.arrays, inputs.preprocessor.model_dimensions(), checkpoints
    )
    answering, test, days = evaluation, job.arrays["test"], job.day_arrays
    if settings.backtest.refit:
        served = refit(
            recipe,
            pl.concat([inputs.rows["train"], inputs.rows["validation"]]),
            windows,
            inputs.preprocessor,
            kept_epochs(evaluation),
            checkpoints / "refit",
        )
        answering = served.results
        test = served.preprocessor.transform(inputs.rows["test"], windows)
        days = served.preprocessor.transform(job.day_rows, candidates.windows)
    answers = FoldAnswers.of(evaluation, answering, job.arrays["validation"], test, days)
    return fold_outcome(settings, job, answers, baselines, time.perf_counter() - started)


def fold_outcome(
    settings: Settings, job: FoldJob, answers: FoldAnswers, baselines: Path, seconds: float
) -> FoldOutcome:
    """A trained fold scored: every model calibrated on the validation rows (the baselines
    trained here, or read from `baselines`), the held-out rows and push days with each model's
    P, and the members' band."""
    inputs = job.inputs
    held_out_answer = ensemble_probability(answers.test)
    scores = {
        TRANSFORMER: Scores(
            answers.validation, held_out_answer, ensemble_probability(answers.push_days)
        ),
        # Only its push days are scored: the days' ranking with the weather masked.
        NO_WEATHER: Scores(
            answers.validation,
            held_out_answer,
            ensemble_probability(answers.push_days_without_weather),
        ),
        **_baseline_scores(
            job.arrays, job.day_arrays, inputs, settings.train, baselines / inputs.fold.name
        ),
    }
    columns = {}
    calibrators = {}
    for name in MODELS:
        calibrators[name] = Calibrator.fit(
            settings.train.calibration,
            logit(scores[name].validation),
            job.arrays["validation"].label,
        )
        columns[f"raw_{name}"] = scores[name].test
        columns[name] = calibrators[name].probabilities(logit(scores[name].test))
    members = calibrators[TRANSFORMER].probabilities(answers.test)
    held_out = (
        inputs.rows["test"]
        .select(HELD_OUT_KEYS)
        .with_columns(
            **{name: pl.Series(values) for name, values in columns.items()},
            seed_spread=pl.Series(members.max(axis=0) - members.min(axis=0)),
        )
    )
    push_days = job.day_rows.select(*PEAK_SEASON, "smtdate").with_columns(
        **{name: pl.Series(scores[name].push_days) for name in PUSH_DAY_SCORED}
    )
    summary = {
        "rows": {part: len(a) for part, a in inputs.arrays.items()},
        "seconds": seconds,
        "epochs": answers.epochs.tolist(),
    }
    return FoldOutcome(inputs.fold, held_out, push_days, summary, cached=False)


def _baseline_scores(
    arrays: dict[str, FeatureArrays],
    day_arrays: FeatureArrays,
    inputs: FoldInputs,
    train_config: TrainConfig,
    directory: Path,
) -> dict[str, Scores]:
    """The baselines' scores of the fold: read from `directory` when an earlier run computed
    them, else trained on the fold's rows and written there."""
    parts = [f.name for f in dataclasses.fields(Scores)]
    cache = directory.with_suffix(".npz")
    if cache.exists():
        with np.load(cache) as saved:
            return {
                name: Scores(*(saved[f"{name}/{part}"] for part in parts)) for name in BASELINES
            }
    models = configured_baselines(
        arrays, inputs.preprocessor.categorical_cardinalities, train_config
    )
    scores = {m.name: Scores(m.validation, m.test, m.predict(day_arrays)) for m in models}
    cache.parent.mkdir(parents=True, exist_ok=True)
    partial = cache.with_suffix(".partial.npz")
    np.savez(
        partial,
        **{f"{name}/{part}": getattr(s, part) for name, s in scores.items() for part in parts},
    )
    partial.rename(cache)
    return scores


def _cannot_train(inputs: FoldInputs) -> str | None:
    for part, arrays in inputs.arrays.items():
        if len(arrays) == 0:
            return f"no {part} rows"
        if part != "test" and len(np.unique(arrays.label)) < 2:
            return f"{part} rows have one outcome only"
    return None


def _push_day_rows(
    inputs: FoldInputs, candidates: Candidates, template: Preprocessor
) -> pl.DataFrame:
    """The fold's test-year push-day candidate rows (features rows, one per member and
    candidate day) whose windows are complete."""
    allowed = int(template.extra.get("max_missing_days", 0))
    complete = candidates.windows.group_by("peakid", "date").agg(pl.col("missing_days").max())
    complete = complete.filter(pl.col("missing_days") <= allowed).select("peakid", smtdate="date")
    return candidates.features.filter(pl.col("year") == inputs.fold.test_year).join(
        complete, on=["peakid", "smtdate"], maintain_order="left"
    )


def _fold_files(directory: Path, fold: Fold) -> dict[str, Path]:
    return {
        "held_out": directory / f"fold-{fold.name}-held-out.parquet",
        "push_days": directory / f"fold-{fold.name}-push-days.parquet",
        "summary": directory / f"fold-{fold.name}.json",  # written last: the fold is done
    }


def read_fold(directory: Path, fold: Fold) -> FoldOutcome | None:
    files = _fold_files(directory, fold)
    if not files["summary"].exists():
        return None
    summary = json.loads(files["summary"].read_text())
    if summary.get("skipped"):
        return FoldOutcome(fold, None, None, summary, cached=True)
    return FoldOutcome(
        fold,
        pl.read_parquet(files["held_out"]),
        pl.read_parquet(files["push_days"]),
        summary,
        cached=True,
    )


def write_fold(directory: Path, outcome: FoldOutcome) -> None:
    files = _fold_files(directory, outcome.fold)
    if outcome.held_out is not None and outcome.push_days is not None:
        outcome.held_out.write_parquet(files["held_out"])
        outcome.push_days.write_parquet(files["push_days"])
    partial = files["summary"].with_suffix(".partial")
    partial.write_text(json.dumps(outcome.summary, indent=2))
    partial.rename(files["summary"])


def _report(
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
    held_out = pl.concat([o.held_out for o in trained])
    candidates = pl.concat([o.push_days for o in trained if o.push_days.height])
    members = held_out.filter(pl.col("record") == "member")
    table = season_table(members, MODELS, config.min_season_rows, config.disaster_seasons)
    expeditions = expedition_table(
        held_out.filter(pl.col("record") == "expedition"),
        MODELS,
        config.min_season_expeditions,
        config.unscored_seasons,
    )
    grouped = members.join(peak_groups(features), on="peakid", how="left")
    groups = {
        group: season_table(
            grouped.filter(pl.col("group") == group),
            MODELS,
            config.min_season_rows,
            config.disaster_seasons,
        )
        for group in PEAK_GROUPS
    }
    calibration = choose_calibration(
        held_out.rename({f"raw_{TRANSFORMER}": "raw"}), "raw", config.newest_folds
    )
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
    return BacktestReport(
        directory=directory,
        folds=outcomes,
        held_out=held_out,
        seasons=table,
        groups=groups,
        expeditions=expeditions,
        calibration=calibration,
        push_days=summarise(skills, PUSH_DAY_MODELS),
        daily=pl.concat(daily),
        seed_spread=float(held_out["seed_spread"].mean()),
    )
