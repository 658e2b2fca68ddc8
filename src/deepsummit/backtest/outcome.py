"""One fold scored: every model's answer on the test year's rows and push days, as served.

Every model answers through the map fitted on its member check: the transformer's, and each
baseline's, trained on the same rows through the same protocol (deepsummit/train/
baseline_protocol.py). Each held-out row keeps each model's answer without its map too
(`raw_<model>`), so the report shows what the maps do. The fold's member check chooses the
model served as the train stage's does (deepsummit/train/blending.py): the transformer alone,
or its blend with the best tree; its answer is `SERVED`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from deepsummit.backtest.answers import FoldAnswers
from deepsummit.backtest.folds import Fold, FoldJob
from deepsummit.backtest.push_days import PEAK_SEASON
from deepsummit.contracts.blend import mix
from deepsummit.contracts.trees import CATBOOST, LIGHTGBM
from deepsummit.core.config import Settings
from deepsummit.serve.inference import ensemble_logit, ensemble_probability
from deepsummit.train.baseline_protocol import baseline_seeds, run_baselines
from deepsummit.train.baselines import LOGISTIC
from deepsummit.train.comparison import TRANSFORMER, logit
from deepsummit.train.evaluation import HELD_OUT_KEYS, TreeLead, lead_over_trees
from deepsummit.train.recipe import fit_calibrator, out_of_fold_answers

SERVED = "served"  # the model the fold's member check chose to serve
OWN = (TRANSFORMER, LIGHTGBM, CATBOOST, LOGISTIC)  # the models with answers of their own
MODELS = (SERVED, *OWN)  # the served model first: the one the report's differences start from
BASELINES = (LOGISTIC, LIGHTGBM, CATBOOST)
TREES = (LIGHTGBM, CATBOOST)
WEATHER_MASKED = "transformer, weather masked"
PUSH_DAY_SCORED = (TRANSFORMER, WEATHER_MASKED, LIGHTGBM, CATBOOST)  # scored on the days


@dataclass(frozen=True)
class FoldOutcome:
    fold: Fold
    held_out: pl.DataFrame | None  # the test year's rows: raw_<model>, <model>, seed_spread
    push_days: pl.DataFrame | None  # candidate rows: peak-season, smtdate, P per model
    summary: dict  # rows, seconds, the member check; or the reason it was skipped
    cached: bool

    @property
    def skipped(self) -> str | None:
        return self.summary.get("skipped")


@dataclass(frozen=True)
class Scores:
    """One model's own probabilities on a fold's test rows and push-day candidates, its
    answer on the test rows as served (through its map), and its own probabilities on the
    member check's rows (trained on the years before them: what its map is fitted on)."""

    test: np.ndarray
    push_days: np.ndarray
    served: np.ndarray
    check: np.ndarray


def fold_outcome(
    settings: Settings, job: FoldJob, answers: FoldAnswers, baselines: Path, seconds: float
) -> FoldOutcome:
    """A trained fold scored (see the module docstring); the baselines trained here, or read
    from `baselines` when an earlier run trained them."""
    calibrator = fit_calibrator(settings.train, ensemble_logit(answers.check), job.check.members)
    transformer = calibrator.probabilities(ensemble_logit(answers.test), job.test_rows)
    check = ensemble_probability(answers.check)
    scores = {
        TRANSFORMER: Scores(
            ensemble_probability(answers.test),
            ensemble_probability(answers.push_days),
            transformer,
            check,
        ),
        # Only its push days are scored: the days' ranking with the weather masked.
        WEATHER_MASKED: Scores(
            ensemble_probability(answers.test),
            ensemble_probability(answers.push_days_without_weather),
            transformer,
            check,
        ),
        **baseline_scores(job, settings, baselines / job.fold.name),
    }
    lead = served_lead(settings, job, answers.check, scores)
    served = {
        SERVED: mix(transformer, scores[lead.tree].served, lead.weight)
        if lead is not None and lead.blended
        else transformer,
        **{name: scores[name].served for name in OWN},
    }
    members = calibrator.probabilities(answers.test, job.test_rows)
    held_out = job.test_rows.select(HELD_OUT_KEYS).with_columns(
        **{f"raw_{name}": pl.Series(scores[name].test) for name in OWN},
        **{name: pl.Series(values) for name, values in served.items()},
        seed_spread=pl.Series(members.max(axis=0) - members.min(axis=0)),
    )
    push_days = job.day_rows.select(*PEAK_SEASON, "smtdate").with_columns(
        **{name: pl.Series(scores[name].push_days) for name in PUSH_DAY_SCORED}
    )
    summary = {
        "rows": {"before": job.before.height, "test": job.test_rows.height},
        "seconds": seconds,
        "member_check": {
            "years": list(job.check.years),
            "members": job.check.members.height,
            "map": dataclasses.asdict(calibrator),
        },
        "epochs": [[t.best_epoch, t.epochs_run] for t in answers.trainings()],
        "served": lead.describe() if lead is not None else TRANSFORMER,
    }
    return FoldOutcome(job.fold, held_out, push_days, summary, cached=False)


def served_lead(
    settings: Settings, job: FoldJob, check_logits: np.ndarray, scores: dict[str, Scores]
) -> TreeLead | None:
    """The fold's transformer against its best tree on its member check, and the model
    served on that evidence, as the train stage chooses it (`check_logits`: the transformer's
    members' logits on the check's rows)."""
    rows = job.check.members
    return lead_over_trees(
        rows,
        settings.train,
        {name: scores[name].check for name in TREES},
        out_of_fold_answers(settings.train, ensemble_logit(check_logits), rows),
        settings.baselines.served,
    )


def baseline_scores(job: FoldJob, settings: Settings, directory: Path) -> dict[str, Scores]:
    """The baselines' scores of the fold: read from `directory` when an earlier run computed
    them, else trained on the fold's rows before its test year through the protocol and
    written there."""
    parts = [f.name for f in dataclasses.fields(Scores)]
    cache = directory.with_suffix(".npz")
    if cache.exists():
        with np.load(cache) as saved:
            return {
                name: Scores(*(saved[f"{name}/{part}"] for part in parts)) for name in BASELINES
            }
    models = run_baselines(
        job.arrays["train"],
        job.arrays["test"],
        job.preprocessor.categorical_cardinalities,
        job.stopping,
        job.check,
        settings.baselines,
        settings.train,
        baseline_seeds(settings.baselines, settings.model, settings.train),
    )
    scores = {
        m.name: Scores(
            m.test,
            m.predict(job.day_arrays),
            m.calibrator.probabilities(logit(m.test), job.test_rows),
            m.check,
        )
        for m in models
    }
    cache.parent.mkdir(parents=True, exist_ok=True)
    partial = cache.with_suffix(".partial.npz")
    np.savez(
        partial,
        **{f"{name}/{part}": getattr(s, part) for name, s in scores.items() for part in parts},
    )
    partial.rename(cache)
    return scores
