"""Test-split metrics, the same for the transformer and the baselines.

Expected calibration error: the predictions are cut into 10 equal-width bins of probability
([0, 0.1), …, [0.9, 1.0]); ECE = Σ_b (n_b / N) · |mean label_b − mean probability_b|, over
non-empty bins. 0 is perfectly calibrated; a model that always says 0.5 on a 40 % base rate
scores 0.1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from sklearn.metrics import log_loss, roc_auc_score

CALIBRATION_BINS = 10
THRESHOLD = 0.5  # accuracy's decision threshold


@dataclass(frozen=True)
class Metrics:
    auc: float
    accuracy: float
    brier: float
    ece: float
    log_loss: float
    rows: int
    positive_rate: float

    def as_dict(self, prefix: str = "") -> dict[str, float]:
        return {f"{prefix}{name}": float(value) for name, value in asdict(self).items()}


def expected_calibration_error(
    labels: np.ndarray, probabilities: np.ndarray, bins: int = CALIBRATION_BINS
) -> float:
    # np.digitize on the inner edges puts p = 1.0 in the last bin, not an extra one.
    bin_index = np.digitize(probabilities, np.linspace(0, 1, bins + 1)[1:-1])
    error = 0.0
    for b in range(bins):
        in_bin = bin_index == b
        if in_bin.any():
            error += in_bin.mean() * abs(labels[in_bin].mean() - probabilities[in_bin].mean())
    return float(error)


def compute_metrics(labels: np.ndarray, probabilities: np.ndarray) -> Metrics:
    labels = np.asarray(labels, dtype=np.float64)
    probabilities = np.asarray(probabilities, dtype=np.float64)
    return Metrics(
        auc=float(roc_auc_score(labels, probabilities)),
        accuracy=float(np.mean((probabilities >= THRESHOLD) == (labels == 1))),
        brier=float(np.mean((probabilities - labels) ** 2)),
        ece=expected_calibration_error(labels, probabilities),
        log_loss=float(log_loss(labels, np.clip(probabilities, 1e-7, 1 - 1e-7), labels=[0, 1])),
        rows=len(labels),
        positive_rate=float(labels.mean()),
    )


def auc_by_group(
    labels: np.ndarray, probabilities: np.ndarray, groups: Sequence[str]
) -> dict[str, float]:
    """AUC per group value; NaN where a group holds a single class (AUC undefined there)."""
    groups = np.asarray(groups, dtype=object)
    result: dict[str, float] = {}
    for value in sorted({str(g) for g in groups}):
        mask = groups.astype(str) == value
        y = labels[mask]
        result[value] = (
            float(roc_auc_score(y, probabilities[mask])) if len(np.unique(y)) == 2 else math.nan
        )
    return result
