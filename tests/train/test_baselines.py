"""The baselines see the transformer's inputs and learn from them."""

from __future__ import annotations

import dataclasses

import numpy as np
from sklearn.metrics import roc_auc_score
from sklearn.preprocessing import OneHotEncoder
from synthetic import CARDINALITIES, synthetic_arrays

from deepsummit.core.sections import TrainConfig
from deepsummit.train.baselines import linear_matrix, run_baselines, tree_matrix

# 50 rounds learn the synthetic signal (test AUC 0.89-0.91); CatBoost takes 0.08 s a round.
CONFIG = TrainConfig(seed=0, num_threads=1, lightgbm_rounds=50, catboost_rounds=50)


def test_design_matrices_carry_every_input_and_mark_missing_values() -> None:
    arrays = synthetic_arrays(50, seed=3)
    encoder = OneHotEncoder(
        categories=[list(range(size)) for size in CARDINALITIES], sparse_output=False
    ).fit(arrays.categorical)
    linear = linear_matrix(arrays, encoder)
    # numeric + flags, one-hot, binary + flags, weather + flags (26·16 each), sin/cos of the day.
    assert linear.shape == (50, 8 + 8 + sum(CARDINALITIES) + 6 + 6 + 416 + 416 + 2)

    tree = tree_matrix(arrays)
    assert tree.shape == (50, 8 + 6 + 6 + 416 + 1)
    np.testing.assert_array_equal(np.isnan(tree[:, :8]), arrays.numeric_missing)
    np.testing.assert_array_equal(np.isnan(tree[:, 14:20]), arrays.binary_missing)


def test_every_baseline_learns_the_signal_on_the_same_split() -> None:
    train, test = (synthetic_arrays(n, seed) for n, seed in ((800, 1), (300, 3)))
    results = run_baselines(train, test, CARDINALITIES, CONFIG)
    assert [r.name for r in results] == ["logistic regression", "LightGBM", "CatBoost"]
    for result in results:
        assert result.test.shape == (len(test),)
        assert roc_auc_score(test.label, result.test) > 0.75, result.name
        assert result.train_seconds > 0 and result.predict_seconds_per_1000 > 0
        # A fold without push-day candidates asks about no rows: an empty answer, no error.
        assert result.predict(test.subset(np.arange(0))).shape == (0,)


def test_every_baseline_reads_the_rows_weights() -> None:
    """A row weighted zero teaches nothing: weighing every row with label 1 down to zero leaves
    each model unable to tell that class apart (its training set is one class in effect)."""
    train, test = (synthetic_arrays(n, seed) for n, seed in ((800, 1), (300, 3)))
    flipped = dataclasses.replace(
        train, weight=np.where(train.label == 1, 1e-6, 1.0).astype(np.float32)
    )
    plain = run_baselines(train, test, CARDINALITIES, CONFIG)
    weighted = run_baselines(flipped, test, CARDINALITIES, CONFIG)
    for before, after in zip(plain, weighted, strict=True):
        assert after.test.mean() < 0.5 * before.test.mean(), before.name
