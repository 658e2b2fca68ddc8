"""Intervals for test metrics, by a bootstrap over expeditions.

Members of one expedition share a date, a route, a team and its weather: they are not
independent draws, so resampling members would make intervals look narrower than they are. Each
replicate draws the test split's expeditions with replacement and weighs every member by how
often its expedition was drawn. A 95% interval is the 2.5th and 97.5th percentile of the
replicates (percentile bootstrap). Comparing two models on the same rows uses the same
replicates for both (a paired bootstrap), so what they share cancels out.

All metrics take weights so that one sort of the scores serves every replicate:
AUC = Σ_pos w_i · (W_neg below s_i + ½ W_neg tied with s_i) / (W_pos · W_neg).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from deepsummit.train.metrics import CALIBRATION_BINS

LEVEL = 0.95
REPLICATES = 1000
SEED = 20_240_523  # fixed: the same rows give the same interval in every run


@dataclass(frozen=True)
class Interval:
    estimate: float  # the metric on the test split as it is
    low: float
    high: float

    def render(self, digits: int = 3) -> str:
        if np.isnan(self.estimate):
            return "–"
        return f"{self.estimate:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"

    def as_dict(self, name: str) -> dict[str, float]:
        return {name: self.estimate, f"{name}_ci_low": self.low, f"{name}_ci_high": self.high}


def replicate_weights(
    groups: np.ndarray, replicates: int = REPLICATES, seed: int = SEED
) -> np.ndarray:
    """(replicates, n) weights: how often each row's group was drawn in each replicate."""
    codes, _ = _codes(groups)
    if not len(codes):  # no rows (a backtest of expedition seasons only has no member rows)
        return np.zeros((replicates, 0))
    n_groups = int(codes.max()) + 1
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(n_groups, np.full(n_groups, 1.0 / n_groups), size=replicates)
    return draws[:, codes].astype(np.float64)


def _codes(groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    values, codes = np.unique(np.asarray(groups, dtype=str), return_inverse=True)
    return codes, values


def weighted_auc(labels: np.ndarray, scores: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """AUC per row of `weights` (replicates × n); NaN where a replicate has one class only.

    Scores are sorted once; rows with equal scores form a run, within which a positive counts
    half of the run's negatives (the Mann-Whitney convention for ties)."""
    if not len(scores):  # no rows: no class at all
        return np.full(np.atleast_2d(weights).shape[0], np.nan)
    order = np.argsort(scores, kind="mergesort")
    sorted_scores = np.asarray(scores)[order]
    positive = np.asarray(labels, dtype=bool)[order]
    w = np.atleast_2d(weights)[:, order]
    run_starts = np.flatnonzero(np.r_[True, sorted_scores[1:] != sorted_scores[:-1]])
    positives = np.add.reduceat(np.where(positive, w, 0.0), run_starts, axis=1)  # (B, runs)
    negatives = np.add.reduceat(np.where(positive, 0.0, w), run_starts, axis=1)
    negatives_below = np.cumsum(negatives, axis=1) - negatives
    w_pos, w_neg = positives.sum(axis=1), negatives.sum(axis=1)
    credit = (positives * (negatives_below + 0.5 * negatives)).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((w_pos > 0) & (w_neg > 0), credit / (w_pos * w_neg), np.nan)


def weighted_brier(
    labels: np.ndarray, probabilities: np.ndarray, weights: np.ndarray
) -> np.ndarray:
    squared = (np.asarray(probabilities, dtype=np.float64) - labels) ** 2
    return (np.atleast_2d(weights) * squared).sum(axis=1) / np.atleast_2d(weights).sum(axis=1)


def weighted_ece(labels: np.ndarray, probabilities: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Expected calibration error over the 10 equal-width bins of `evaluation`, weighted."""
    w = np.atleast_2d(weights)
    p = np.asarray(probabilities, dtype=np.float64)
    bins = np.digitize(p, np.linspace(0, 1, CALIBRATION_BINS + 1)[1:-1])
    total = w.sum(axis=1)
    error = np.zeros(w.shape[0])
    for b in range(CALIBRATION_BINS):
        in_bin = bins == b
        if not in_bin.any():
            continue
        count = w[:, in_bin].sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            gap = np.abs(w[:, in_bin] @ labels[in_bin] - w[:, in_bin] @ p[in_bin]) / count
        error += np.where(count > 0, count / total * gap, 0.0)
    return error


def interval(estimate: float, replicates: np.ndarray, level: float = LEVEL) -> Interval:
    """The estimate with the percentile interval of its bootstrap replicates."""
    tail = (1 - level) / 2 * 100
    if np.isnan(replicates).all():  # nothing to resample (e.g. a group with no scored season)
        return Interval(float(estimate), float("nan"), float("nan"))
    low, high = np.nanpercentile(replicates, [tail, 100 - tail])
    return Interval(float(estimate), float(low), float(high))


@dataclass(frozen=True)
class MetricIntervals:
    auc: Interval
    brier: Interval
    ece: Interval

    def as_dict(self, prefix: str = "") -> dict[str, float]:
        return {
            **self.auc.as_dict(f"{prefix}auc"),
            **self.brier.as_dict(f"{prefix}brier"),
            **self.ece.as_dict(f"{prefix}ece"),
        }


def metric_intervals(
    labels: np.ndarray, probabilities: np.ndarray, weights: np.ndarray
) -> MetricIntervals:
    """AUC, Brier and ECE with their intervals over the replicates `weights`."""
    labels = np.asarray(labels, dtype=np.float64)
    ones = np.ones((1, len(labels)))
    return MetricIntervals(
        *(
            interval(metric(labels, probabilities, ones)[0], metric(labels, probabilities, weights))
            for metric in (weighted_auc, weighted_brier, weighted_ece)
        )
    )


def paired_auc_difference(
    labels: np.ndarray, first: np.ndarray, second: np.ndarray, weights: np.ndarray
) -> Interval:
    """AUC(first) − AUC(second) on the same rows, with its paired interval."""
    ones = np.ones((1, len(labels)))
    estimate = weighted_auc(labels, first, ones)[0] - weighted_auc(labels, second, ones)[0]
    replicates = weighted_auc(labels, first, weights) - weighted_auc(labels, second, weights)
    return interval(estimate, replicates)
