"""Post-hoc calibration: each method recovers a known miscalibration, keeps the ranking, and
round-trips through its JSON."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from deepsummit.contracts.calibration import Calibrator
from deepsummit.train.metrics import expected_calibration_error


@pytest.fixture(scope="module")
def overconfident():
    """Logits three times too large, and the true base rate shifted: z = 3·(true logit) − 1."""
    rng = np.random.default_rng(3)
    true_logit = rng.normal(0.4, 1.2, 20_000)
    labels = (rng.random(true_logit.size) < 1 / (1 + np.exp(-true_logit))).astype(float)
    return 3.0 * true_logit - 1.0, labels


@pytest.mark.parametrize("method", ["temperature", "platt", "isotonic"])
def test_each_method_improves_calibration_and_keeps_the_ranking(overconfident, method) -> None:
    logits, labels = overconfident
    raw = 1 / (1 + np.exp(-logits))
    calibrator = Calibrator.fit(method, logits, labels)
    calibrated = calibrator.probabilities(logits)
    before, after = (
        expected_calibration_error(labels, raw),
        expected_calibration_error(labels, calibrated),
    )
    assert after < before / 2
    assert roc_auc_score(labels, calibrated) == pytest.approx(roc_auc_score(labels, raw), abs=2e-3)
    assert Calibrator.from_json(calibrator.to_json()) == calibrator


def test_temperature_and_platt_recover_the_known_parameters(overconfident) -> None:
    logits, labels = overconfident
    assert Calibrator.fit("temperature", logits, labels).scale < 0.5  # 1 / T: shrinks logits
    platt = Calibrator.fit("platt", logits, labels)
    assert platt.scale == pytest.approx(1 / 3, abs=0.03)
    assert platt.shift == pytest.approx(1 / 3, abs=0.05)


def test_none_is_the_plain_sigmoid() -> None:
    z = np.array([-2.0, 0.0, 3.0])
    np.testing.assert_allclose(
        Calibrator.fit("none", z, np.ones(3)).probabilities(z), 1 / (1 + np.exp(-z))
    )
