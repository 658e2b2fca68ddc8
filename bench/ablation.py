"""What each group of inputs is worth: the transformer, trained as the train stage trains it, and
LightGBM, as in the baselines, on several input sets of one features snapshot, in one run.

Input sets (a is always run: every difference is taken against it):

- a  shipped: the cpu profile's inputs as configured in deepsummit.toml
- b  the spec's 20 tokens only (features.extra_inputs = [])
- c  shipped with the `agency` token toggled: added when the shipped inputs lack it, removed
     when they have it (its success rate, the staff ratio and the days at base camp stay)
- d  shipped without weather: every weather value masked, the way the arrays mark a value that
     is missing (weather_missing all true, values 0). The model has no switch that drops its 26
     weather tokens; masked, they carry only the learned missing projection and their time
     encodings (days before D, day of year), so the calendar position stays. LightGBM sees the
     weather columns as all missing and keeps the day of year.
- e  shipped without the two oxygen tokens (oxygen_planned, o2_available)
- f  retrospective reference: shipped + oxygen_used, recorded after the climb (what the
     `retrospective` profile adds); never a decision-time model

Per set: the transformer trained `train.seeds` times (cpu profile, seeds seed, seed + 1, …), the
registered answer being their mean logit, and LightGBM on the stage's training slice; both
calibrated on validation with `train.calibration` and scored on the identical test rows by
deepsummit.train.comparison.compare, with 95% intervals from the expedition bootstrap of
deepsummit/train/bootstrap.py (Brier and ECE after calibration; the ECE before it beside them).
ΔAUC vs (a) is paired: the same model's AUC with this set minus with (a), on the same
replicates. The transformer's train seconds add up its seeds. Prints markdown.

    .venv/bin/python bench/ablation.py [--features DIR] [--bundle DIR]
        [--sets a,b,c,d,e,f] [--seeds N] [--max-train-rows N] [--threads 1]
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from dataclasses import dataclass
from typing import Any

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

from deepsummit.contracts.arrays import FeatureArrays
from deepsummit.core.config import Settings
from deepsummit.core.inputs import SPEC_INPUTS, InputSet
from deepsummit.train.baselines import lightgbm
from deepsummit.train.bootstrap import paired_auc_difference, replicate_weights
from deepsummit.train.comparison import TRANSFORMER, Comparison, SeedSpread, logit
from deepsummit.train.evaluation import compare_with_seeds
from deepsummit.train.recipe import transformer_predictions
from deepsummit.train.trainer import training_slice

logger = logging.getLogger("ablation")

REFERENCE = "a"
OXYGEN_TOKENS = ("oxygen_planned", "o2_available")


@dataclass(frozen=True)
class InputVariant:
    name: str
    inputs: InputSet
    weather: bool = True


@dataclass(frozen=True)
class SetResult:
    comparison: Comparison
    calibrated: dict[str, np.ndarray]  # model name → calibrated test probabilities


def input_variants(shipped: InputSet) -> dict[str, InputVariant]:
    def without(*names: str) -> InputSet:
        return InputSet.of([n for n in shipped.names if n not in names])

    agency = (
        InputVariant("shipped − agency token", without("agency"))
        if "agency" in shipped.names
        else InputVariant("shipped + agency token", InputSet.of((*shipped.names, "agency")))
    )

    return {
        "a": InputVariant("shipped (cpu profile)", shipped),
        "b": InputVariant("spec tokens only", InputSet.of(SPEC_INPUTS)),
        "c": agency,
        "d": InputVariant("shipped − weather (masked)", shipped, weather=False),
        "e": InputVariant("shipped − oxygen tokens", without(*OXYGEN_TOKENS)),
        "f": InputVariant(
            "retrospective: shipped + oxygen_used (post-climb)",
            InputSet.of((*shipped.names, "oxygen_used")),
        ),
    }


def evaluate(
    settings: Settings,
    arrays: dict[str, FeatureArrays],
    dimensions: dict[str, Any],
    groups: np.ndarray,
) -> SetResult:
    """The transformer's seeds and LightGBM on one input set, compared as the train stage does."""
    train_config = settings.train
    results = train_seeds(settings, arrays, dimensions)
    validation, test = arrays["validation"], arrays["test"]
    train = training_slice(arrays["train"], train_config.max_train_rows, train_config.seed)
    models = [
        transformer_predictions(results, arrays),
        lightgbm(train, validation, test, train_config.seed, train_config.num_threads),
    ]
    comparison = compare_with_seeds(models, results, arrays, groups, train_config.calibration)
    calibrated = {
        m.name: comparison.calibrators[m.name].probabilities(logit(m.test)) for m in models
    }
    return SetResult(comparison, calibrated)


def table_rows(
    key: str,
    variant: InputVariant,
    result: SetResult,
    reference: SetResult,
    labels: np.ndarray,
    weights: np.ndarray,
) -> list[str]:
    lines = []
    for row in result.comparison.rows:
        m = row.calibrated
        if result is reference:
            delta = "–"
        else:
            first, second = result.calibrated[row.name], reference.calibrated[row.name]
            delta = render_signed(paired_auc_difference(labels, first, second, weights))
        seeds = render_seeds(result.comparison.seeds) if row.name == TRANSFORMER else "–"
        lines.append(
            f"| ({key}) {variant.name} | {variant.inputs.tokens} | {row.name} "
            f"| {m.auc.render(4)} | {m.brier.render(4)} | {m.ece.render(4)} "
            f"| {row.ece_before:.4f} | {delta} "
            f"| {seeds} | {row.train_seconds:.0f} |"
        )
    return lines


def render_seeds(seeds: SeedSpread | None) -> str:
    """Mean ± sd of the seeds' test AUCs, then each one."""
    if seeds is None:
        return "–"
    aucs, sd = seeds.test_auc, seeds.test_auc_sd
    spread = f" ± {sd:.4f}" if sd is not None else ""
    return f"{np.mean(aucs):.4f}{spread} ({', '.join(f'{a:.4f}' for a in aucs)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_snapshot_options(parser)
    parser.add_argument(
        "--sets", default="a,b,c,d,e,f", help="comma-separated set keys (a is always run)"
    )
    args = parser.parse_args()
    started, load_before = time.perf_counter(), os.getloadavg()
    settings = bench_settings(args)
    snapshot = snapshot_location(args, settings)
    variants = input_variants(settings.features.model_inputs())
    keys = [REFERENCE, *(k for k in args.sets.split(",") if k and k != REFERENCE)]
    unknown = [k for k in keys if k not in variants]
    if unknown:
        parser.error(f"unknown set(s) {unknown}; known: {', '.join(variants)}")

    groups = split_groups(snapshot, "test")
    weights = replicate_weights(groups)
    train_config = settings.train
    print(
        f"features {snapshot}; calibration {train_config.calibration} on validation; "
        f"transformer: profile {settings.profile}, {train_config.seeds} seed(s) from "
        f"{train_config.seed}, registered = the seeds' mean logit; train rows "
        f"{train_config.max_train_rows or 'all'}; threads {train_config.num_threads}; "
        f"95% CIs over {len(np.unique(groups)):,} test expeditions\n"
    )
    print(
        "| input set | tabular tokens | model | test AUC [95% CI] | Brier [95% CI] "
        "| ECE [95% CI] | ECE before calibration | ΔAUC vs (a) [95% paired CI] "
        "| transformer seeds' test AUC: mean ± sd (each) | train s |"
    )
    print("| --- | ---: | --- | --- | --- | --- | ---: | --- | --- | ---: |", flush=True)
    results: dict[str, SetResult] = {}
    for key in keys:
        variant = variants[key]
        logger.info("set (%s) %s: %s", key, variant.name, ", ".join(variant.inputs.names))
        arrays, preprocessor = input_set_arrays(snapshot, variant.inputs)
        if not variant.weather:
            arrays = {split: a.without_weather() for split, a in arrays.items()}
        results[key] = evaluate(settings, arrays, preprocessor.model_dimensions(), groups)
        labels = arrays["test"].label
        for line in table_rows(key, variant, results[key], results[REFERENCE], labels, weights):
            print(line, flush=True)

    print("\n| input set | transformer − LightGBM, test AUC [95% paired CI] |")
    print("| --- | --- |")
    for key, result in results.items():
        (difference,) = result.comparison.differences.values()
        print(f"| ({key}) {variants[key].name} | {render_signed(difference)} |")
    print_wall(started, load_before)


if __name__ == "__main__":
    main()
