"""The seeds' spread as the run summary and MLflow report it."""

from __future__ import annotations

import pytest

from deepsummit.train.comparison import SeedSpread


def test_three_seeds_report_their_mean_and_sample_deviation_and_the_best_on_validation() -> None:
    seeds = SeedSpread((42, 43, 44), (0.80, 0.85, 0.82), (0.70, 0.72, 0.74))
    assert seeds.best == 43
    assert seeds.test_auc_sd == pytest.approx(0.02)
    assert seeds.render() == (
        "test AUC 0.7200 ± 0.0200 (mean ± sd over seeds 42: 0.7000, 43: 0.7200, 44: 0.7400)"
    )


def test_one_seed_has_no_deviation_rather_than_nan() -> None:
    seeds = SeedSpread((42,), (0.80,), (0.70,))
    assert seeds.test_auc_sd is None
    assert seeds.render() == "test AUC 0.7000 (one seed, 42: 0.7000)"
