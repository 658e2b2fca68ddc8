"""The training run's plots: ROC, reliability and learning curves, drawn to files."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never a display

import matplotlib.pyplot as plt
import numpy as np
from sklearn.metrics import roc_auc_score, roc_curve

from deepsummit.train.checkpoint import EpochRecord
from deepsummit.train.metrics import CALIBRATION_BINS, expected_calibration_error


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
