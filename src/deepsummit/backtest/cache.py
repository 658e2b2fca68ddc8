"""Where the backtest keeps what it trained, so a rerun trains nothing and a run cut short
resumes: each fold's outcome, each member check's answers, each fold's baselines' answers.

Each fold's outcome lives under `<backtest.output_dir>/<key>/`, the key a digest of the snapshot
and of every setting that changes a result; what the transformer's trainings left (their
checkpoints, the member checks' answers) under `trainings/<key>`, a key of what they follow
from, so settings that differ only in the calibration map fitted after them share them (a new
map re-scores the folds, training nothing); the baselines' answers under a key of what they
follow from alone (`baselines_key`), so candidates that differ in the transformer share them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np
import polars as pl

from deepsummit.backtest.folds import Fold
from deepsummit.backtest.outcome import FoldOutcome, Scores
from deepsummit.contracts.snapshot import PREPROCESSING_FILE
from deepsummit.core.config import Settings
from deepsummit.core.sections import TrainConfig
from deepsummit.train.baseline_protocol import baseline_seeds
from deepsummit.train.recipe import CheckInputs, MemberCheck
from deepsummit.train.trainer import TrainingSummary, training_knobs

# The training settings the baselines read besides their own (the map's, the member check's).
BASELINE_SETTINGS = {
    "seed", "max_train_rows", "recency_half_life", "member_check_years", "calibration",
    "calibration_shifts_by", "calibration_shift_penalty",
}  # fmt: skip


def _digest(document: dict) -> str:
    text = json.dumps(document, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _folds_key(settings: Settings, snapshot: Path) -> dict:
    """What every model of a fold is trained and judged on: the snapshot's content, the input
    set, the folds."""
    preprocessing = json.loads((snapshot / PREPROCESSING_FILE).read_text())
    return {
        "snapshot": preprocessing["extra"]["snapshot_digest"],
        "inputs": settings.features.model_inputs().names,
        "folds": settings.backtest.model_dump(mode="json", include={"push_day_min_summiters"}),
        "served": "every season before the test year",
    }


def baselines_key(settings: Settings, snapshot: Path) -> str:
    """What a fold's baselines follow from: its rows (`_folds_key`), their own settings, and
    the training settings they read (seed, slice, row weights, the map, the member check, the
    transformer's ensemble members as their seeds)."""
    return _digest(
        {
            **_folds_key(settings, snapshot),
            "train": settings.train.model_dump(mode="json", include=BASELINE_SETTINGS),
            # Which model is served follows from their answers: no setting of theirs.
            "baselines": settings.baselines.model_dump(mode="json", exclude={"served"}),
            "seeds": baseline_seeds(settings.baselines, settings.model, settings.train),
            "answers": [f.name for f in dataclasses.fields(Scores)],
        }
    )


def trainings_key(settings: Settings, snapshot: Path) -> str:
    """What a fold's trainings follow from: its rows (`_folds_key`) and the settings that train
    the transformer (not where files go, nor the map, nor the baselines' settings)."""
    return _digest(
        {
            "folds": _folds_key(settings, snapshot),
            "model": dataclasses.asdict(settings.model),
            "train": training_knobs(settings.train),
        }
    )


def backtest_key(settings: Settings, snapshot: Path) -> str:
    """What a fold's result follows from: its trainings, the map fitted after them, the
    baselines' answers, and the setting that chooses the model served from them."""
    return _digest(
        {
            "trainings": trainings_key(settings, snapshot),
            "map": settings.train.model_dump(mode="json", include=set(TrainConfig.CALIBRATION)),
            "baselines": baselines_key(settings, snapshot),
            "served": settings.baselines.served,
        }
    )


def fold_directories(settings: Settings, snapshot: Path) -> tuple[Path, Path]:
    """Where the folds of these settings are cached, and where their baselines' answers are."""
    output = settings.backtest.output_dir
    return (
        output / backtest_key(settings, snapshot),
        output / "baselines" / baselines_key(settings, snapshot),
    )


def trainings_directory(settings: Settings, snapshot: Path) -> Path:
    """Where the folds' trainings of these settings keep their checkpoints and member checks."""
    return settings.backtest.output_dir / "trainings" / trainings_key(settings, snapshot)


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


def _check_file(directory: Path, years: tuple[int, ...]) -> Path:
    return directory / f"member-check-{'-'.join(map(str, years))}.npz"


def read_check(directory: Path, inputs: CheckInputs) -> MemberCheck | None:
    """The member check of `inputs`' years, when an earlier fold trained it."""
    path = _check_file(directory, inputs.years)
    if not path.exists():
        return None
    with np.load(path) as saved:
        trainings = TrainingSummary.from_array(saved["trainings"])
        return MemberCheck(inputs.years, inputs.members, saved["logits"], trainings)


def write_check(directory: Path, check: MemberCheck) -> None:
    path = _check_file(directory, check.years)
    partial = path.with_suffix(".partial.npz")
    np.savez(
        partial,
        logits=check.logits,
        trainings=TrainingSummary.to_array(check.trainings),
    )
    partial.rename(path)
