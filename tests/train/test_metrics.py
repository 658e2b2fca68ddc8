"""Test-split metrics (with the ECE definition pinned by hand-computed cases) and plots."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from deepsummit.train.checkpoint import EpochRecord
from deepsummit.train.metrics import auc_by_group, compute_metrics, expected_calibration_error
from deepsummit.train.plots import plot_calibration, plot_learning_curve, plot_roc

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_a_perfect_ranking_scores_auc_one_and_accuracy_one() -> None:
    labels = np.array([0, 0, 1, 1])
    metrics = compute_metrics(labels, np.array([0.1, 0.2, 0.8, 0.9]))
    assert metrics.auc == 1.0
    assert metrics.accuracy == 1.0
    assert metrics.brier == pytest.approx((0.01 + 0.04 + 0.04 + 0.01) / 4)
    assert metrics.log_loss == pytest.approx(-np.mean(np.log([0.9, 0.8, 0.8, 0.9])))
    assert metrics.rows == 4 and metrics.positive_rate == 0.5


def test_ece_of_a_constant_half_on_a_forty_percent_base_rate_is_one_tenth() -> None:
    labels = np.array([1, 1, 0, 0, 0] * 20)
    assert expected_calibration_error(labels, np.full(100, 0.5)) == pytest.approx(0.1)


def test_ece_weighs_each_bin_by_its_share_of_rows() -> None:
    # Bin [0.2, 0.3): 4 rows at 0.25, 1 positive → gap 0. Bin [0.9, 1.0]: 1 row at 1.0 (the
    # closed last bin), label 0 → gap 1. ECE = 4/5 · 0 + 1/5 · 1.
    labels = np.array([1, 0, 0, 0, 0])
    probabilities = np.array([0.25, 0.25, 0.25, 0.25, 1.0])
    assert expected_calibration_error(labels, probabilities) == pytest.approx(0.2)


def test_auc_by_group_is_nan_where_a_group_has_one_class() -> None:
    labels = np.array([0, 1, 0, 1, 1, 1])
    probabilities = np.array([0.2, 0.8, 0.9, 0.1, 0.5, 0.6])
    groups = ["EVER", "EVER", "CHOY", "CHOY", "AMAD", "AMAD"]
    aucs = auc_by_group(labels, probabilities, groups)
    assert aucs["EVER"] == 1.0
    assert aucs["CHOY"] == 0.0
    assert math.isnan(aucs["AMAD"])


def test_plots_are_written_as_png(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 200)
    curves = {"a": rng.random(200), "b": np.clip(labels * 0.6 + rng.random(200) * 0.4, 0, 1)}
    history = [EpochRecord(e, 0.7 - e / 100, 0.69, 0.6 + e / 100, 1e-3, 1.0) for e in (1, 2, 3)]
    paths = [
        plot_roc(labels, curves, tmp_path / "roc.png"),
        plot_calibration(labels, curves, tmp_path / "calibration.png"),
        plot_learning_curve(history, tmp_path / "plots" / "learning.png"),
    ]
    for path in paths:
        assert path.read_bytes()[:8] == PNG_MAGIC
