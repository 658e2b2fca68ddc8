"""The seeds' spread as the run summary and MLflow report it, each model judged as it is
served, and answers that barely move flagged."""

from __future__ import annotations

import numpy as np
import pytest

from deepsummit.contracts.calibration import Calibrator
from deepsummit.train.baselines import ModelPredictions
from deepsummit.train.comparison import SeedSpread, compare, flat_answer


def test_three_seeds_report_their_mean_deviation_and_band_width() -> None:
    seeds = SeedSpread((42, 43, 44), (0.80, 0.85, 0.82), (0.70, 0.72, 0.74), 0.031)
    assert seeds.test_auc_sd == pytest.approx(0.02)
    assert seeds.render() == (
        "test AUC 0.7200 ± 0.0200 (mean ± sd over seeds 42: 0.7000, 43: 0.7200, 44: 0.7400); "
        "the answer is their mean, their mean spread on a test row 0.031"
    )


def test_one_seed_has_no_deviation_rather_than_nan() -> None:
    seeds = SeedSpread((42,), (0.80,), (0.70,), 0.0)
    assert seeds.test_auc_sd is None
    assert seeds.render() == "test AUC 0.7000 (one seed, 42: 0.7000)"


def test_each_model_is_judged_through_its_own_map_and_the_others_as_they_are() -> None:
    rng = np.random.default_rng(0)
    p = rng.uniform(0.2, 0.7, 4000) + np.repeat([0.0, 0.1], 2000)  # 2024 went better
    labels = (rng.random(4000) < p).astype(float)
    seasons = np.repeat(["2023 Spring", "2024 Spring"], 2000)
    groups = np.arange(4000) // 5
    transformer = ModelPredictions("transformer", p, 0.0, 0.0, lambda arrays: p)
    tree = ModelPredictions("tree", p, 0.0, 0.0, lambda arrays: p)
    steep = Calibrator("temperature", scale=2.0)
    comparison = compare([transformer, tree], {"transformer": steep}, labels, groups, seasons)
    assert comparison.calibrators["transformer"] is steep
    assert comparison.calibrators["tree"].method == "none"
    mapped, plain = comparison.rows
    assert plain.calibrated.ece.estimate == pytest.approx(plain.ece_before, abs=1e-9)
    assert mapped.calibrated.ece.estimate > mapped.ece_before  # this P was right before the map
    # A strictly monotone map leaves the ranking as it was.
    assert comparison.differences["transformer − tree"].estimate == pytest.approx(0, abs=1e-12)
    assert not mapped.flag and not plain.flag


def test_an_answer_that_barely_moves_is_flagged_never_shown_as_skill() -> None:
    rng = np.random.default_rng(1)
    labels = (rng.random(2000) < 0.5).astype(float)
    groups = np.arange(2000) // 5
    seasons = np.repeat(["2023 Spring", "2023 Autumn", "2024 Spring", "2024 Autumn"], 500)
    # Ranks a little, but says 0.42 ± 0.01 in every season while they summit at 0.37–0.61.
    flat = 0.42 + 0.01 * np.tanh(labels - 0.5 + rng.normal(0, 1, 2000))
    assert flat_answer(flat, seasons).startswith("near-constant")
    # Moves over the rows, but its season means stay within 0.03 of each other.
    spread = rng.uniform(0.2, 0.6, 2000)
    assert flat_answer(spread, seasons).startswith("its season means span")
    moving = spread + np.repeat([0.0, 0.05, 0.1, 0.15], 500)
    assert flat_answer(moving, seasons) == ""
    model = ModelPredictions("tree", flat, 0.0, 0.0, lambda arrays: flat)
    row = compare([model], {}, labels, groups, seasons).rows[0]
    assert row.flag
    text = compare([model], {}, labels, groups, seasons).markdown()
    assert f"({row.calibrated.auc.render()})" in text and "no skill" in text
