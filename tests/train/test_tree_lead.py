"""The evaluation reports the transformer against the best tree on the member check, and
serves the transformer alone where it leads that tree beyond noise (deepsummit/train/
blending.py holds the blend's side)."""

from __future__ import annotations

import numpy as np
import polars as pl

from deepsummit.core.sections import TrainConfig
from deepsummit.train.baselines import ModelPredictions
from deepsummit.train.evaluation import lead_over_trees, tree_checks

CONFIG = TrainConfig(calibration_shifts_by=())


def _tree(name: str, check: np.ndarray) -> ModelPredictions:
    return ModelPredictions(
        name, np.zeros(1), 0.0, 0.0, lambda arrays: check, rounds=10, check=check
    )


def test_the_best_tree_is_the_one_that_ranks_the_check_best_and_the_lead_is_paired() -> None:
    rng = np.random.default_rng(0)
    n = 4000
    signal = rng.normal(size=n)
    labels = (rng.random(n) < 1 / (1 + np.exp(-2 * signal))).astype(np.int64)
    rows = pl.DataFrame(
        {"expid": [f"E{i // 4}" for i in range(n)], "year": np.repeat([2018, 2019], n // 2),
         "label": labels}
    )  # fmt: skip

    def noisy(scale: float) -> np.ndarray:
        return 1 / (1 + np.exp(-(signal + rng.normal(scale=scale, size=n))))

    transformer = noisy(0.3)
    trees = [_tree("weak", noisy(3.0)), _tree("strong", noisy(1.0))]
    logistic = ModelPredictions("logistic", np.zeros(1), 0.0, 0.0, lambda a: a, check=noisy(0.0))
    checks = tree_checks([logistic, *trees])
    assert list(checks) == ["weak", "strong"]  # the logistic regression is no tree
    lead = lead_over_trees(rows, CONFIG, checks, transformer)
    assert lead is not None and lead.tree == "strong"
    assert lead.transformer_auc > lead.tree_auc
    assert lead.difference.low <= lead.difference.estimate <= lead.difference.high
    assert np.isclose(lead.difference.estimate, lead.transformer_auc - lead.tree_auc)
    assert lead.difference.low > 0
    # A lead beyond noise: the transformer answers alone.
    assert (lead.weight, lead.blended, lead.served) == (1.0, False, "transformer")
    assert "transformer − strong" in lead.describe() and "served: transformer" in lead.describe()


def test_no_tree_no_lead() -> None:
    rows = pl.DataFrame({"expid": ["E"], "year": [2019], "label": [1]})
    assert lead_over_trees(rows, CONFIG, {}, np.zeros(1)) is None
