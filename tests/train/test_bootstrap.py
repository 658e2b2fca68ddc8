"""Intervals by a bootstrap over expeditions: the weighted metrics agree with scikit-learn, the
replicates resample whole expeditions, and a paired difference cancels what the models share."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from deepsummit.train.bootstrap import (
    metric_intervals,
    paired_auc_difference,
    replicate_weights,
    weighted_auc,
    weighted_brier,
    weighted_ece,
)
from deepsummit.train.metrics import expected_calibration_error


@pytest.fixture(scope="module")
def sample():
    rng = np.random.default_rng(7)
    groups = np.repeat(np.arange(300), rng.integers(1, 12, 300))
    n = len(groups)
    labels = (rng.random(n) < 0.6).astype(float)
    # scores rounded to two decimals: plenty of ties, which AUC must count as halves
    scores = np.round(np.clip(0.5 + 0.2 * (labels - 0.5) + rng.normal(0, 0.25, n), 0, 1), 2)
    return groups, labels, scores


def test_weighted_metrics_equal_scikit_learn_with_sample_weights(sample) -> None:
    _, labels, scores = sample
    weights = np.random.default_rng(1).integers(0, 4, (3, len(labels))).astype(float)
    for row in weights:
        assert weighted_auc(labels, scores, row[None])[0] == pytest.approx(
            roc_auc_score(labels, scores, sample_weight=row), abs=1e-12
        )
        assert weighted_brier(labels, scores, row[None])[0] == pytest.approx(
            np.average((scores - labels) ** 2, weights=row)
        )
    ones = np.ones((1, len(labels)))
    assert weighted_ece(labels, scores, ones)[0] == pytest.approx(
        expected_calibration_error(labels, scores)
    )


def test_replicates_draw_whole_expeditions(sample) -> None:
    groups, _, _ = sample
    weights = replicate_weights(groups, replicates=50)
    for replicate in weights:
        # every member of an expedition carries the same count, and as many draws as groups
        per_group = {g: set(replicate[groups == g]) for g in np.unique(groups)}
        assert all(len(counts) == 1 for counts in per_group.values())
        assert sum(next(iter(c)) for c in per_group.values()) == len(per_group)
    assert np.array_equal(weights, replicate_weights(groups, replicates=50))  # fixed seed


def test_intervals_hold_their_estimate_and_widen_with_clustering(sample) -> None:
    groups, labels, scores = sample
    intervals = metric_intervals(labels, scores, replicate_weights(groups))
    for interval in (intervals.auc, intervals.brier, intervals.ece):
        assert interval.low < interval.estimate < interval.high
    # When an expedition's members share their outcome and their score, resampling members
    # as if independent gives a narrower (overconfident) interval than resampling expeditions.
    rng = np.random.default_rng(11)
    group_label = rng.random(groups.max() + 1) < 0.6
    group_score = 0.5 + 0.1 * (group_label - 0.5) + rng.normal(0, 0.2, group_label.size)
    shared = group_label[groups].astype(float)
    clustered = group_score[groups] + rng.normal(0, 0.01, len(groups))
    by_member = metric_intervals(shared, clustered, replicate_weights(np.arange(len(groups))))
    by_expedition = metric_intervals(shared, clustered, replicate_weights(groups))
    width = lambda i: i.auc.high - i.auc.low  # noqa: E731
    assert width(by_expedition) > width(by_member)


def test_a_paired_difference_is_zero_for_the_same_model_and_signed_for_a_better_one(sample):
    groups, labels, scores = sample
    weights = replicate_weights(groups)
    same = paired_auc_difference(labels, scores, scores.copy(), weights)
    assert (same.estimate, same.low, same.high) == (0.0, 0.0, 0.0)
    better = np.clip(scores + 0.3 * (labels - 0.5), 0, 1)
    diff = paired_auc_difference(labels, better, scores, weights)
    assert diff.low > 0
    assert diff.estimate == pytest.approx(
        roc_auc_score(labels, better) - roc_auc_score(labels, scores)
    )
