"""The served model: the transformer alone where it leads the best tree on the member check,
else its blend with that tree, whose refit trees save and load in their libraries' own formats
and answer the same to the last bit."""

from __future__ import annotations

import numpy as np
import pytest
from synthetic import CARDINALITIES, synthetic_arrays

from deepsummit.contracts.blend import Blend, mix
from deepsummit.contracts.calibration import Calibrator
from deepsummit.contracts.trees import CATBOOST, LIGHTGBM, SavedTrees
from deepsummit.core.baseline_sections import BaselinesConfig
from deepsummit.core.sections import TrainConfig
from deepsummit.train.blending import blend_weight, refit_trees, served_weight
from deepsummit.train.bootstrap import Interval

CONFIG = BaselinesConfig(max_rounds=50, patience=10)
RNG = np.random.default_rng(7)
LABELS = (RNG.random(4000) < 0.4).astype(np.float64)


def _answers(signal: float) -> np.ndarray:
    """Probabilities that rank `LABELS` with strength `signal` (0: noise)."""
    z = signal * (2 * LABELS - 1) + RNG.normal(size=len(LABELS))
    return 1 / (1 + np.exp(-z))


def test_the_mix_is_each_part_at_its_ends_and_rises_with_each() -> None:
    transformer, tree = np.array([0.2, 0.5, 0.9]), np.array([0.6, 0.6, 0.1])
    np.testing.assert_allclose(mix(transformer, tree, 1.0), transformer)
    np.testing.assert_allclose(mix(transformer, tree, 0.0), tree)
    halfway = mix(transformer, tree, 0.5)
    assert (np.minimum(transformer, tree) <= halfway).all()
    assert (halfway <= np.maximum(transformer, tree)).all()
    assert (mix(transformer + 0.05, tree, 0.5) > halfway).all()


def test_the_weight_goes_to_the_part_that_ranks() -> None:
    good, noise = _answers(1.5), _answers(0.0)
    assert blend_weight(LABELS, good, noise) >= 0.9
    assert blend_weight(LABELS, noise, good) <= 0.1
    assert 0.2 <= blend_weight(LABELS, _answers(1.0), _answers(1.0)) <= 0.8


def test_a_transformer_that_leads_beyond_noise_answers_alone_unless_the_setting_says() -> None:
    equal = (_answers(1.0), _answers(1.0))
    leads, level = Interval(0.03, 0.01, 0.05), Interval(0.01, -0.01, 0.03)
    assert served_weight("auto", leads, LABELS, *equal) == 1.0
    assert served_weight("auto", level, LABELS, *equal) < 1.0
    assert served_weight("transformer", level, LABELS, *equal) == 1.0
    assert served_weight("blend", leads, LABELS, *equal) < 1.0


@pytest.mark.parametrize("library", [LIGHTGBM, CATBOOST])
def test_a_refit_tree_answers_the_same_after_saving_and_loading(library, tmp_path) -> None:
    train, test = synthetic_arrays(800, 1), synthetic_arrays(300, 3)
    training = TrainConfig(num_threads=1)
    trees = refit_trees(library, 30, train, CARDINALITIES, CONFIG, training, seeds=2)
    assert (trees.library, len(trees.models)) == (library, 2)
    blend = Blend(trees, 0.6, Calibrator("platt", scale=0.9, shift=-0.1))
    blend.save(tmp_path)
    loaded = Blend.load(tmp_path)
    assert loaded is not None and loaded.parts == f"transformer 0.60 + {library} 0.40"
    np.testing.assert_array_equal(loaded.trees.probability(test), trees.probability(test))
    np.testing.assert_array_equal(loaded.tree_answers(test, None), blend.tree_answers(test, None))
    assert Blend.load(tmp_path / "elsewhere") is None  # a version serving the transformer alone


def test_an_unknown_tree_library_is_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match="no tree library 'XGBoost'"):
        SavedTrees.load("XGBoost", False, tmp_path, [])
