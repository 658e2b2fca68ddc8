"""The baselines see the transformer's inputs, learn from them, and count their rounds on
validation rows."""

from __future__ import annotations

import dataclasses

import numpy as np
from sklearn.metrics import roc_auc_score
from sklearn.preprocessing import OneHotEncoder
from synthetic import CARDINALITIES, synthetic_arrays

from deepsummit.contracts.trees import CATBOOST, LIGHTGBM, tree_matrix
from deepsummit.core.baseline_sections import BaselinesConfig
from deepsummit.train.baselines import LOGISTIC, baseline_fits, linear_matrix

# At most 50 rounds learn the synthetic signal (test AUC 0.89-0.91); CatBoost takes 0.08 s a round.
CONFIG = BaselinesConfig(max_rounds=50, patience=10)
FITS = baseline_fits(CONFIG, CARDINALITIES, threads=1)
TREES = (LIGHTGBM, CATBOOST)


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
    # Without the weather window: the tabular inputs and the attempt day only.
    np.testing.assert_array_equal(
        tree_matrix(arrays, weather=False), np.hstack([tree[:, :20], tree[:, -1:]])
    )


def test_every_baseline_learns_the_signal_counting_its_rounds_on_validation_rows() -> None:
    train, validation, test = (synthetic_arrays(n, s) for n, s in ((800, 1), (300, 2), (300, 3)))
    assert list(FITS) == [LOGISTIC, LIGHTGBM, CATBOOST]
    for name, fit in FITS.items():
        fitted = fit(train, 0, None, validation)
        answers = fitted.probability(test)
        assert answers.shape == (len(test),)
        assert roc_auc_score(test.label, answers) > 0.75, name
        if name in TREES:
            assert 1 <= fitted.rounds <= CONFIG.max_rounds, name


def test_a_tree_stops_where_its_validation_rows_stop_improving() -> None:
    """Validation rows whose outcomes are the opposite of what the signal says: every round
    ranks them worse, so the count is the first round, however many are allowed."""
    train = synthetic_arrays(800, 1)
    opposite = synthetic_arrays(300, 2)
    opposite = dataclasses.replace(opposite, label=1 - opposite.label)
    for name in TREES:
        assert FITS[name](train, 0, None, opposite).rounds <= CONFIG.patience, name


def test_a_tree_given_its_rounds_trains_that_many() -> None:
    train, test = synthetic_arrays(800, 1), synthetic_arrays(300, 3)
    for name in TREES:
        one, many = (FITS[name](train, 0, rounds, None) for rounds in (1, 40))
        assert (one.rounds, many.rounds) == (1, 40)
        # One round barely moves off the base rate; forty learn the signal.
        assert np.ptp(one.probability(test)) < np.ptp(many.probability(test)), name


def test_every_baseline_reads_the_rows_weights() -> None:
    """A row weighted zero teaches nothing: weighing every row with label 1 down to zero leaves
    each model unable to tell that class apart (its training set is one class in effect)."""
    train, test = (synthetic_arrays(n, seed) for n, seed in ((800, 1), (300, 3)))
    flipped = dataclasses.replace(
        train, weight=np.where(train.label == 1, 1e-6, 1.0).astype(np.float32)
    )
    for name, fit in FITS.items():
        plain, weighted = (fit(rows, 0, 30, None).probability(test) for rows in (train, flipped))
        assert weighted.mean() < 0.5 * plain.mean(), name
