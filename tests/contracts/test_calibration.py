"""Post-hoc calibration: each method recovers a known miscalibration, keeps the ranking, and
round-trips through its JSON."""

from __future__ import annotations

import itertools

import numpy as np
import polars as pl
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


@pytest.fixture(scope="module")
def older_fall_behind():
    """Members whose true logit is the network's z falling by 0.06 a year past 50, 1.2 by 70
    (centred, so that the level over all rows stays z's): a network that stays flat with age,
    as the served one did. A tenth of the rows has no age."""
    rng = np.random.default_rng(5)
    n = 30_000
    age = rng.integers(18, 75, n).astype(float)
    z = rng.normal(0.3, 1.0, n)
    decline = 0.06 * np.clip(age - 50, 0, 20)
    true_logit = z - (decline - decline.mean())
    labels = (rng.random(n) < 1 / (1 + np.exp(-true_logit))).astype(float)
    rows = pl.DataFrame({"age": age, "label": labels}).with_columns(
        age=pl.when(pl.Series(rng.random(n) < 0.1)).then(None).otherwise(pl.col("age"))
    )
    return z, labels, rows


def _oldest_gap(calibrator: Calibrator, z: np.ndarray, labels: np.ndarray, rows) -> float:
    oldest = (rows["age"] >= 60).fill_null(False).to_numpy()
    return float(calibrator.probabilities(z, rows)[oldest].mean() - labels[oldest].mean())


@pytest.mark.parametrize("method", ["temperature", "platt"])
def test_an_age_shift_answers_the_oldest_band_where_one_scale_cannot(
    older_fall_behind, method
) -> None:
    z, labels, rows = older_fall_behind
    plain = Calibrator.fit(method, z, labels)
    shifted = Calibrator.fit(method, z, labels, rows, ("age",), penalty=0.001)
    assert _oldest_gap(plain, z, labels, rows) > 0.1
    assert abs(_oldest_gap(shifted, z, labels, rows)) < 0.02
    shifts = shifted.group_shifts["age"]  # a curve: its knots every ten years
    assert list(shifts) == ["20", "30", "40", "50", "60", "70"]
    assert shifts["70"] - shifts["50"] == pytest.approx(-1.2, abs=0.15)
    # Centred: over the rows it was fitted on, the shifts change the mean answer by little.
    assert shifted.probabilities(z, rows).mean() == pytest.approx(labels.mean(), abs=0.01)
    assert Calibrator.from_json(shifted.to_json()) == shifted


def test_the_age_curve_moves_a_member_smoothly_from_one_birthday_to_the_next(
    older_fall_behind,
) -> None:
    z, labels, rows = older_fall_behind
    shifted = Calibrator.fit("temperature", z, labels, rows, ("age",), penalty=0.001)
    ages = pl.DataFrame({"age": np.arange(15.0, 90.0)})
    offsets = shifted.group_offsets(ages, ages.height)
    steepest = max(abs(b - a) for a, b in itertools.pairwise(shifted.group_shifts["age"].values()))
    # Linear between knots ten years apart, flat outside them: no step larger than a tenth of
    # the steepest knot-to-knot change, and none at all before 20 or after 70.
    assert np.abs(np.diff(offsets)).max() <= steepest / 10 + 1e-12
    assert np.ptp(offsets[:6]) == 0 and np.ptp(offsets[-20:]) == 0


def test_a_map_fitted_with_age_bands_still_answers_by_band() -> None:
    """A map registered before age became a curve keeps its band shifts."""
    banded = Calibrator("temperature", group_shifts={"age": {"50s": 0.25, "60 and over": -0.5}})
    rows = pl.DataFrame({"age": [55.0, 65.0, 35.0]})
    np.testing.assert_allclose(banded.group_offsets(rows, 3), [0.25, -0.5, 0.0])


def test_the_shifts_average_to_nothing_and_an_unknown_age_gets_none(older_fall_behind) -> None:
    z, labels, rows = older_fall_behind
    shifted = Calibrator.fit("temperature", z, labels, rows, ("age",))
    known = rows.filter(pl.col("age").is_not_null())
    offsets = shifted.group_offsets(known, known.height)
    assert offsets.mean() == pytest.approx(0.0, abs=1e-9)
    unknown = pl.DataFrame({"age": [None]}, schema={"age": pl.Float64})
    expected = 1 / (1 + np.exp(-shifted.scale * 0.5))
    assert shifted.probabilities(np.array([0.5]), unknown)[0] == pytest.approx(expected)


def test_a_shifting_map_refuses_answers_without_the_member_columns(older_fall_behind) -> None:
    z, labels, rows = older_fall_behind
    shifted = Calibrator.fit("temperature", z, labels, rows, ("age",))
    with pytest.raises(ValueError, match="shifts by age: it needs the member columns"):
        shifted.probabilities(z)
    with pytest.raises(ValueError, match="'isotonic' map cannot shift member groups"):
        Calibrator.fit("isotonic", z, labels, rows, ("age",))
