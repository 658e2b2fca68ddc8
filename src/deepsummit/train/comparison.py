"""The comparison a training run reports: every model calibrated the same way on the validation
split, scored on the identical test rows, each figure with its 95% interval from a bootstrap over
expeditions, the transformer against each baseline as a paired difference, and the spread of
the transformer's seeds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from deepsummit.contracts.calibration import Calibrator, Method
from deepsummit.train.baselines import ModelPredictions
from deepsummit.train.bootstrap import (
    Interval,
    MetricIntervals,
    metric_intervals,
    paired_auc_difference,
    replicate_weights,
)
from deepsummit.train.evaluation import compute_metrics, expected_calibration_error

TRANSFORMER = "transformer"


def logit(probabilities: np.ndarray) -> np.ndarray:
    p = np.clip(np.asarray(probabilities, np.float64), 1e-7, 1 - 1e-7)
    return np.log(p / (1 - p))


@dataclass(frozen=True)
class ModelRow:
    name: str
    calibrated: MetricIntervals  # AUC, Brier and ECE of the calibrated probabilities
    ece_before: float  # ECE of the model's own probabilities, before calibration
    accuracy: float
    log_loss: float
    train_seconds: float
    predict_seconds_per_1000: float


@dataclass(frozen=True)
class SeedSpread:
    """The transformer trained with several seeds: each one's validation and test AUC."""

    seeds: tuple[int, ...]
    validation_auc: tuple[float, ...]
    test_auc: tuple[float, ...]

    @property
    def best(self) -> int:
        """The seed with the best validation AUC: the one a run registers."""
        return self.seeds[int(np.argmax(self.validation_auc))]

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
        return f"test AUC {mean:.4f} ± {sd:.4f} (mean ± sd over seeds {runs})"


@dataclass(frozen=True)
class Comparison:
    rows: tuple[ModelRow, ...]  # the transformer first
    differences: dict[str, Interval]  # "transformer − LightGBM" → paired AUC difference
    seeds: SeedSpread
    calibration: Method
    test_rows: int
    expeditions: int
    calibrators: dict[str, Calibrator] = field(default_factory=dict)

    def markdown(self) -> str:
        lines = [
            f"Test split: {self.test_rows:,} attempts of {self.expeditions:,} expeditions; "
            f"95% intervals from {self.expeditions:,}-expedition bootstrap replicates; every "
            f"model calibrated ({self.calibration}) on the validation split.",
            "",
            "| model | AUC [95% CI] | Brier [95% CI] | ECE [95% CI] | ECE before calibration "
            "| train s |",
            "| --- | --- | --- | --- | ---: | ---: |",
        ]
        for row in self.rows:
            m = row.calibrated
            lines.append(
                f"| {row.name} | {m.auc.render()} | {m.brier.render()} | {m.ece.render()} "
                f"| {row.ece_before:.3f} | {row.train_seconds:.0f} |"
            )
        lines += ["", f"Transformer seeds: {self.seeds.render()}.", ""]
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
            }
        for name, diff in self.differences.items():
            values |= diff.as_dict(f"auc_difference_{slug(name.split(' − ')[1])}")
        values["transformer_test_auc_seed_mean"] = float(np.mean(self.seeds.test_auc))
        if self.seeds.test_auc_sd is not None:
            values["transformer_test_auc_seed_sd"] = self.seeds.test_auc_sd
        return values


def slug(name: str) -> str:
    return {"logistic regression": "logreg", "LightGBM": "lightgbm"}.get(name, name)


def compare(
    models: list[ModelPredictions],
    validation_labels: np.ndarray,
    test_labels: np.ndarray,
    test_groups: np.ndarray,
    calibration: Method,
    seeds: SeedSpread,
) -> Comparison:
    """Calibrate each model on validation, score every one on the same test rows (the first
    model, the transformer, is the one the differences are taken from)."""
    weights = replicate_weights(test_groups)
    rows, calibrated, calibrators = [], {}, {}
    for model in models:
        calibrator = Calibrator.fit(calibration, logit(model.validation), validation_labels)
        probabilities = calibrator.probabilities(logit(model.test))
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
            )
        )
        calibrated[model.name], calibrators[model.name] = probabilities, calibrator
    first, *others = models
    differences = {
        f"{first.name} − {other.name}": paired_auc_difference(
            test_labels, calibrated[first.name], calibrated[other.name], weights
        )
        for other in others
    }
    return Comparison(
        rows=tuple(rows),
        differences=differences,
        seeds=seeds,
        calibration=calibration,
        test_rows=len(test_labels),
        expeditions=len(np.unique(np.asarray(test_groups, dtype=str))),
        calibrators=calibrators,
    )
