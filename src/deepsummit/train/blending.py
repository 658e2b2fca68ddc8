"""Which model is served: the transformer alone, or blended with the best tree
(deepsummit/contracts/blend.py), chosen on the member check alone.

- The transformer answers alone where it leads the best tree on the member check beyond noise:
  the lower bound of their paired AUC difference (each through a map fitted on the check's other
  years) is above 0.
- Otherwise the blend's weight w is fitted on the same rows and answers: the w of
  0, 0.05, …, 1 whose mixed answers have the lowest log loss. A w of 1 is the transformer alone.
- The setting `baselines.served` can pin either instead: "transformer", or "blend" (its weight
  then fitted below 1).

The tree of a served blend is refit like the transformer that is registered: on every season,
at the rounds the protocol counted for the evaluation, once per seed.
"""

from __future__ import annotations

import numpy as np

from deepsummit.contracts.arrays import FeatureArrays
from deepsummit.contracts.blend import mix
from deepsummit.contracts.trees import SavedTrees
from deepsummit.core.baseline_sections import BaselinesConfig
from deepsummit.core.sections import TrainConfig
from deepsummit.train.baselines import baseline_fits
from deepsummit.train.bootstrap import Interval
from deepsummit.train.trainer import training_slice

WEIGHTS = np.linspace(0.0, 1.0, 21)


def blend_weight(
    labels: np.ndarray, transformer: np.ndarray, tree: np.ndarray, weights: np.ndarray = WEIGHTS
) -> float:
    """The transformer's weight, of `weights`, whose mix of the two answers has the lowest
    log loss on `labels` (module docstring)."""
    y = np.asarray(labels, np.float64)

    def log_loss(weight: float) -> float:
        p = np.clip(mix(transformer, tree, weight), 1e-7, 1 - 1e-7)
        return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))

    return float(min(weights, key=log_loss))


def served_weight(
    served: str, lead: Interval, labels: np.ndarray, transformer: np.ndarray, tree: np.ndarray
) -> float:
    """The transformer's weight in the served model, by the `baselines.served` setting: 1.0
    where it answers alone ("transformer", or "auto" where it leads the tree beyond noise;
    `lead`: transformer − tree on the member check), else the blend's fitted weight."""
    if served == "transformer" or (served == "auto" and lead.low > 0):
        return 1.0
    # A blend asked for keeps some of the tree, however little the check says it adds.
    return blend_weight(labels, transformer, tree, WEIGHTS[:-1] if served == "blend" else WEIGHTS)


def refit_trees(
    name: str,
    rounds: int,
    arrays: FeatureArrays,
    cardinalities: tuple[int, ...],
    config: BaselinesConfig,
    training: TrainConfig,
    seeds: int,
) -> SavedTrees:
    """The tree `name` trained on `arrays` (every season, read through the registered
    preprocessing whose vocabularies are `cardinalities`) at `rounds`, once per seed."""
    fit = baseline_fits(config, cardinalities, training.num_threads)[name]
    train = training_slice(arrays, training.max_train_rows, training.seed)
    fitted = [fit(train, training.seed + offset, rounds, None) for offset in range(seeds)]
    parts = [f.trees for f in fitted if f.trees is not None]
    if len(parts) != seeds:
        raise ValueError(f"{name} is no tree: nothing to serve in a blend")
    return SavedTrees(parts[0].library, parts[0].weather, tuple(m for p in parts for m in p.models))
