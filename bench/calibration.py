"""The post-hoc calibration methods of deepsummit/contracts/calibration.py side by side on the
shipped model: none, temperature, Platt and isotonic, each scored by ECE and Brier

- on the validation split by grouped cross-fitting: the map is fitted on the other folds'
  expeditions and applied to the held-out fold, so every validation row is scored by a map that
  never saw it; this is how a method would be chosen without looking at test;
- on the test split, with the map fitted on the whole validation split (what the train stage
  does).

The model is the transformer with the cpu profile's inputs, trained as the train stage trains
it; the answer it registers (the mean logit of `train.seeds` seeds) is calibrated. 95% intervals
come from the expedition bootstrap of deepsummit/train/bootstrap.py, on each split's own
expeditions; ΔECE vs none is paired (the same replicates). Prints a markdown table and the
method that validation cross-fitting would choose (lowest ECE).

    .venv/bin/python bench/calibration.py [--features DIR] [--bundle DIR] [--folds 5]
        [--seeds N] [--max-train-rows N] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import get_args

import numpy as np
from _training import (
    add_snapshot_options,
    bench_settings,
    input_set_arrays,
    print_wall,
    render_signed,
    snapshot_location,
    split_groups,
    train_seeds,
)
from sklearn.model_selection import GroupKFold

from deepsummit.contracts.calibration import Calibrator, Method
from deepsummit.train.bootstrap import (
    LEVEL,
    Interval,
    metric_intervals,
    replicate_weights,
    weighted_ece,
)
from deepsummit.train.comparison import logit
from deepsummit.train.recipe import transformer_predictions

METHODS: tuple[Method, ...] = get_args(Method)
FOLD_SEED = 0


def cross_fitted(
    method: Method, logits: np.ndarray, labels: np.ndarray, groups: np.ndarray, folds: int
) -> np.ndarray:
    """Each row's probability from a map fitted on the other folds (folds of whole groups)."""
    probabilities = np.empty(len(labels))
    splitter = GroupKFold(folds, shuffle=True, random_state=FOLD_SEED)
    for fitted, held_out in splitter.split(logits, labels, groups):
        calibrator = Calibrator.fit(method, logits[fitted], labels[fitted])
        probabilities[held_out] = calibrator.probabilities(logits[held_out])
    return probabilities


def paired_difference(
    metric: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
    labels: np.ndarray,
    first: np.ndarray,
    second: np.ndarray,
    weights: np.ndarray,
) -> Interval:
    """metric(first) − metric(second) on the same rows, with its paired percentile interval."""
    ones = np.ones((1, len(labels)))
    estimate = metric(labels, first, ones)[0] - metric(labels, second, ones)[0]
    replicates = metric(labels, first, weights) - metric(labels, second, weights)
    tail = (1 - LEVEL) / 2 * 100
    low, high = np.nanpercentile(replicates, [tail, 100 - tail])
    return Interval(float(estimate), float(low), float(high))


@dataclass(frozen=True)
class Split:
    labels: np.ndarray
    logits: np.ndarray  # the seeds' mean logit, before calibration
    groups: np.ndarray  # expedition of each row
    weights: np.ndarray  # bootstrap replicates over those expeditions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_snapshot_options(parser)
    parser.add_argument("--folds", type=int, default=5, help="validation cross-fitting folds")
    args = parser.parse_args()
    started, load_before = time.perf_counter(), os.getloadavg()
    settings = bench_settings(args)
    snapshot = snapshot_location(args, settings)
    arrays, preprocessor = input_set_arrays(snapshot, settings.features.model_inputs())
    results = train_seeds(settings, arrays, preprocessor.model_dimensions())
    ensemble = transformer_predictions(results, arrays)
    splits = {}
    for name in ("validation", "test"):
        groups = split_groups(snapshot, name)
        splits[name] = Split(
            arrays[name].label.astype(np.float64),
            logit(ensemble.predict(arrays[name])),
            groups,
            replicate_weights(groups),
        )
    validation = splits["validation"]
    probabilities = {
        method: {
            "validation": cross_fitted(
                method, validation.logits, validation.labels, validation.groups, args.folds
            ),
            "test": Calibrator.fit(method, validation.logits, validation.labels).probabilities(
                splits["test"].logits
            ),
        }
        for method in METHODS
    }
    scores = {
        method: {
            name: metric_intervals(split.labels, probabilities[method][name], split.weights)
            for name, split in splits.items()
        }
        for method in METHODS
    }

    print(
        f"features {snapshot}; transformer: profile {settings.profile}, the mean of "
        f"{settings.train.seeds} seeds (best epochs {[r.best_epoch for r in results]}); train "
        f"rows {results[0].train_rows:,}; threads {settings.train.num_threads}"
    )
    for name, split in splits.items():
        print(
            f"{name}: {len(split.labels):,} attempts of {len(np.unique(split.groups)):,} "
            f"expeditions, summit rate {split.labels.mean():.3f}"
        )
    print(
        f"validation CV = {args.folds}-fold cross-fitting by expedition; test = map fitted on "
        "all of validation; 95% CIs from each split's expedition bootstrap\n"
    )
    print(
        "| method | validation CV ECE [95% CI] | validation CV Brier [95% CI] "
        "| validation CV ΔECE vs none [paired CI] | test ECE [95% CI] | test Brier [95% CI] "
        "| test ΔECE vs none [paired CI] |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for method in METHODS:
        cells = []
        for name, split in splits.items():
            difference = paired_difference(
                weighted_ece,
                split.labels,
                probabilities[method][name],
                probabilities["none"][name],
                split.weights,
            )
            score = scores[method][name]
            delta = "–" if method == "none" else render_signed(difference)
            cells += [score.ece.render(4), score.brier.render(4), delta]
        print(f"| {method} | {' | '.join(cells)} |")

    by_ece = min(METHODS, key=lambda m: scores[m]["validation"].ece.estimate)
    by_brier = min(METHODS, key=lambda m: scores[m]["validation"].brier.estimate)
    on_test = min(METHODS, key=lambda m: scores[m]["test"].ece.estimate)
    print(
        f"\nValidation cross-fitting would choose {by_ece} (lowest ECE; lowest Brier: "
        f"{by_brier}). Lowest test ECE: {on_test}. Configured: train.calibration = "
        f"{settings.train.calibration}."
    )
    print_wall(started, load_before)


if __name__ == "__main__":
    main()
