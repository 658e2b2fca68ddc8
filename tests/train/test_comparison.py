"""The seeds' spread as the run summary and MLflow report it, and which calibration map
ships."""

from __future__ import annotations

import numpy as np
import pytest

from deepsummit.train.baselines import ModelPredictions
from deepsummit.train.comparison import SeedSpread, compare


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


def test_a_map_that_makes_the_test_ece_worse_is_not_shipped() -> None:
    rng = np.random.default_rng(0)
    p = rng.uniform(0.2, 0.8, 4000)
    honest = (rng.random(4000) < p).astype(float)  # test: the model's P is right
    gloomy = (rng.random(4000) < p / 3).astype(float)  # validation: a bad season
    model = ModelPredictions("m", p, p, 0.0, 0.0, lambda arrays: p)
    groups = np.arange(4000) // 5
    comparison = compare([model], gloomy, honest, groups, "platt")
    assert comparison.calibrators["m"].method == "none"
    assert comparison.rows[0].calibrated.ece.estimate == pytest.approx(
        comparison.rows[0].ece_before, abs=1e-9
    )
    # Where the map helps (validation like the test years), it ships.
    helped = compare([model], (rng.random(4000) < p / 3).astype(float), gloomy, groups, "platt")
    assert helped.calibrators["m"].method == "platt"
