"""Test-split metrics and plots, the same for the transformer and the baselines.

Expected calibration error: the predictions are cut into 10 equal-width bins of probability
([0, 0.1), …, [0.9, 1.0]); ECE = Σ_b (n_b / N) · |mean label_b − mean probability_b|, over
non-empty bins. 0 is perfectly calibrated; a model that always says 0.5 on a 40 % base rate
scores 0.1.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never a display

import matplotlib.pyplot as plt
import numpy as np
from sklearn.metrics import log_loss, roc_auc_score, roc_curve

from deepsummit.train.trainer import EpochRecord

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


def plot_roc(labels: np.ndarray, curves: Mapping[str, np.ndarray], path: Path) -> Path:
    """One ROC curve per model (name → test probabilities) on shared axes."""
    figure, axes = plt.subplots(figsize=(5.5, 5))
    for name, probabilities in curves.items():
        fpr, tpr, _ = roc_curve(labels, probabilities)
        axes.plot(fpr, tpr, label=f"{name} (AUC {roc_auc_score(labels, probabilities):.3f})")
    axes.plot([0, 1], [0, 1], linestyle=":", color="grey")
    axes.set(xlabel="false positive rate", ylabel="true positive rate", title="ROC, test split")
    axes.legend(loc="lower right")
    return _save(figure, path)


def plot_calibration(
    labels: np.ndarray, curves: Mapping[str, np.ndarray], path: Path, title: str = ""
) -> Path:
    """Reliability: mean label against mean probability per bin (the bins of the ECE)."""
    figure, axes = plt.subplots(figsize=(5.5, 5))
    edges = np.linspace(0, 1, CALIBRATION_BINS + 1)
    for name, probabilities in curves.items():
        bin_index = np.digitize(probabilities, edges[1:-1])
        points = [
            (probabilities[bin_index == b].mean(), labels[bin_index == b].mean())
            for b in range(CALIBRATION_BINS)
            if (bin_index == b).any()
        ]
        x, y = zip(*points, strict=True)
        ece = expected_calibration_error(labels, probabilities)
        axes.plot(x, y, marker="o", label=f"{name} (ECE {ece:.3f})")
    axes.plot([0, 1], [0, 1], linestyle=":", color="grey")
    axes.set(xlabel="mean predicted probability", ylabel="observed summit rate")
    axes.set_title(f"calibration, test split{f', {title}' if title else ''}")
    axes.legend(loc="upper left")
    return _save(figure, path)


def plot_learning_curve(history: Sequence[EpochRecord], path: Path) -> Path:
    """Train and validation loss, and validation AUC, per epoch."""
    figure, (loss_axes, auc_axes) = plt.subplots(1, 2, figsize=(10, 4))
    epochs = [record.epoch for record in history]
    loss_axes.plot(epochs, [r.train_loss for r in history], marker="o", label="train")
    loss_axes.plot(epochs, [r.val_loss for r in history], marker="o", label="validation")
    loss_axes.set(xlabel="epoch", ylabel="BCE loss", title="loss")
    loss_axes.legend()
    auc_axes.plot(epochs, [r.val_auc for r in history], marker="o", color="tab:green")
    auc_axes.set(xlabel="epoch", ylabel="AUC", title="validation AUC")
    return _save(figure, path)


def _save(figure: plt.Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
