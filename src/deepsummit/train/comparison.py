"""The comparison a training run reports: every model as it is served (each through its own
calibration map, fitted on the member check: deepsummit/train/baseline_protocol.py), scored on the
identical test rows, each figure with its 95% interval from a bootstrap over expeditions, the
transformer against each baseline as a paired difference, and the spread of the transformer's
seeds.

A model whose answer barely moves is flagged, never shown as skill: its P varies by less than
`FLAT_SD` over the rows, or its mean P over a season moves by less than `FLAT_SEASONS` across
the test seasons (they summit at rates from 0.37 to 0.61 in the bundle).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from deepsummit.contracts.calibration import Calibrator
from deepsummit.train.baselines import ModelPredictions
from deepsummit.train.bootstrap import (
    Interval,
    MetricIntervals,
    metric_intervals,
    paired_auc_difference,
    replicate_weights,
)
from deepsummit.train.metrics import compute_metrics, expected_calibration_error

TRANSFORMER = "transformer"
FLAT_SD = 0.02  # below this standard deviation of P over the rows, an answer is near-constant
FLAT_SEASONS = 0.03  # below this spread of the seasons' mean P, it ignores the seasons


def logit(probabilities: np.ndarray) -> np.ndarray:
    p = np.clip(np.asarray(probabilities, np.float64), 1e-7, 1 - 1e-7)
    return np.log(p / (1 - p))


@dataclass(frozen=True)
class ModelRow:
    name: str
    calibrated: MetricIntervals  # AUC, Brier and ECE of the answer as served
    ece_before: float  # ECE of the model's own probabilities, before its map
    accuracy: float
    log_loss: float
    train_seconds: float
    predict_seconds_per_1000: float
    flag: str = ""  # why its answer is not skill (`flat_answer`), "" when it is


@dataclass(frozen=True)
class SeedSpread:
    """The transformer trained with several seeds: each one's validation and test AUC, and how
    far apart their calibrated probabilities are on the test rows (the answer is their mean)."""

    seeds: tuple[int, ...]
    validation_auc: tuple[float, ...]
    test_auc: tuple[float, ...]
    test_spread: float  # mean over test rows of (highest − lowest seed's probability)

    @property
    def test_auc_sd(self) -> float | None:
        """The seeds' sample standard deviation; None for one seed."""
        return float(np.std(self.test_auc, ddof=1)) if len(self.test_auc) > 1 else None

    def render(self) -> str:
        mean, sd = float(np.mean(self.test_auc)), self.test_auc_sd
        runs = ", ".join(
            f"{seed}: {auc:.4f}" for seed, auc in zip(self.seeds, self.test_auc, strict=True)
        )
        if sd is None:
            return f"test AUC {mean:.4f} (one seed, {runs})"
        return (
            f"test AUC {mean:.4f} ± {sd:.4f} (mean ± sd over seeds {runs}); the answer is "
            f"their mean, their mean spread on a test row {self.test_spread:.3f}"
        )


@dataclass(frozen=True)
class Comparison:
    rows: tuple[ModelRow, ...]  # the transformer first
    differences: dict[str, Interval]  # "transformer − LightGBM" → paired AUC difference
    test_rows: int
    expeditions: int
    calibrators: dict[str, Calibrator] = field(default_factory=dict)
    seeds: SeedSpread | None = None  # the transformer's, when it was trained with several

    def markdown(self) -> str:
        lines = [
            f"Test split: {self.test_rows:,} attempts of {self.expeditions:,} expeditions; "
            f"95% intervals from {self.expeditions:,}-expedition bootstrap replicates; every "
            "model as served: trained on every season before the test split, each through its "
            "map (fitted on the member check), a tree at the rounds its check counted, "
            "averaged over seeds.",
            "",
            "| model | AUC [95% CI] | Brier [95% CI] | ECE [95% CI] | ECE before the map "
            "| map | train s | flag |",
            "| --- | --- | --- | --- | ---: | --- | ---: | --- |",
        ]
        for row in self.rows:
            m = row.calibrated
            auc = f"({m.auc.render()})" if row.flag else m.auc.render()
            lines.append(
                f"| {row.name} | {auc} | {m.brier.render()} | {m.ece.render()} "
                f"| {row.ece_before:.3f} | {self.calibrators[row.name].name} "
                f"| {row.train_seconds:.0f} | {row.flag} |"
            )
        lines.append("")
        if any(row.flag for row in self.rows):
            lines += [
                f"A flagged model's answer barely moves (P's standard deviation below {FLAT_SD} "
                f"or its season means within {FLAT_SEASONS}): its AUC, in brackets, is no "
                "skill to compare with.",
                "",
            ]
        if self.seeds is not None:
            lines += [f"Transformer seeds: {self.seeds.render()}.", ""]
        lines += [
            f"- AUC {name}: {diff.render(4)} (paired, same rows)"
            for name, diff in self.differences.items()
        ]
        return "\n".join(lines) + "\n"

    def metrics(self) -> dict[str, float]:
        values: dict[str, float] = {}
        for row in self.rows:
            prefix = f"{slug(row.name)}_test_"
            values |= row.calibrated.as_dict(prefix)
            values |= {
                f"{prefix}ece_uncalibrated": row.ece_before,
                f"{prefix}accuracy": row.accuracy,
                f"{prefix}log_loss": row.log_loss,
                f"{prefix}flat": float(bool(row.flag)),
            }
        values |= difference_metrics(self.differences, "auc_difference_")
        if self.seeds is not None:
            values["transformer_test_auc_seed_mean"] = float(np.mean(self.seeds.test_auc))
            values["transformer_test_seed_spread"] = self.seeds.test_spread
            if self.seeds.test_auc_sd is not None:
                values["transformer_test_auc_seed_sd"] = self.seeds.test_auc_sd
        return values


DIFFERENCE = " − "  # "transformer − LightGBM": the first model's figure minus the other's


def difference_name(first: str, other: str) -> str:
    return f"{first}{DIFFERENCE}{other}"


def difference_metrics(differences: dict[str, Interval], prefix: str) -> dict[str, float]:
    """Paired differences as MLflow metrics named `<prefix><other model's slug>`."""
    values: dict[str, float] = {}
    for name, diff in differences.items():
        values |= diff.as_dict(f"{prefix}{slug(name.split(DIFFERENCE)[1])}")
    return values


def slug(name: str) -> str:
    """A model's name as MLflow metric names carry it: "transformer, weather masked" →
    "transformer_weather_masked"."""
    short = {"logistic regression": "logreg", "LightGBM": "lightgbm"}.get(name, name)
    return re.sub(r"[^a-z0-9]+", "_", short.lower()).strip("_")


def flat_answer(probabilities: np.ndarray, seasons: np.ndarray) -> str:
    """Why an answer is no skill to compare (see the module docstring), "" when it is."""
    spread = float(np.std(probabilities))
    if spread < FLAT_SD:
        return f"near-constant (P's sd {spread:.3f})"
    means = [probabilities[seasons == season].mean() for season in np.unique(seasons)]
    if len(means) > 1 and max(means) - min(means) < FLAT_SEASONS:
        return f"its season means span {max(means) - min(means):.3f}"
    return ""


def compare(
    models: list[ModelPredictions],
    calibrators: dict[str, Calibrator],
    test_labels: np.ndarray,
    test_groups: np.ndarray,
    test_seasons: np.ndarray,
    test_rows: pl.DataFrame | None = None,
) -> Comparison:
    """Score every model's answer as served (its own P through its map in `calibrators`, none
    when it has none; `test_rows`: the rows' member columns, for a map that shifts member
    groups) on the same test rows; the first model, the transformer, is the one the
    differences are taken from."""
    weights = replicate_weights(test_groups)
    rows, served = [], {}
    maps = {m.name: calibrators.get(m.name, Calibrator("none")) for m in models}
    for model in models:
        probabilities = maps[model.name].probabilities(logit(model.test), test_rows)
        plain = compute_metrics(test_labels, probabilities)
        rows.append(
            ModelRow(
                name=model.name,
                calibrated=metric_intervals(test_labels, probabilities, weights),
                ece_before=expected_calibration_error(test_labels, model.test),
                accuracy=plain.accuracy,
                log_loss=plain.log_loss,
                train_seconds=model.train_seconds,
                predict_seconds_per_1000=model.predict_seconds_per_1000,
                flag=flat_answer(probabilities, test_seasons),
            )
        )
        served[model.name] = probabilities
    first, *others = models
    differences = {
        difference_name(first.name, other.name): paired_auc_difference(
            test_labels, served[first.name], served[other.name], weights
        )
        for other in others
    }
    return Comparison(
        rows=tuple(rows),
        differences=differences,
        test_rows=len(test_labels),
        expeditions=len(np.unique(np.asarray(test_groups, dtype=str))),
        calibrators=maps,
    )
