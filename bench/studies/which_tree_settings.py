"""Which settings do the baselines get (the trees' learning rate, size, regularisation and
inputs; the logistic regression's C)? Each model searched with the budget the transformer's
profile got (14 candidates), on seasons before every scored one.

Answer: written into the `[settings.baselines]` table of src/deepsummit/deepsummit.toml (this
command prints it) and, with the table of every candidate, in docs/evaluation.md, "Which settings
the baselines get".

The selection fold is the protocol's (deepsummit/train/baseline_protocol.py) with test years
2012–2013: every model is trained on the seasons through 2011; a tree's rounds are counted by
early stopping on the members of the member check, 2010–2011 (trained through 2009); each
candidate is scored by the mean within-season AUC of the members of 2012–2013. These seasons
are before the backtest's first scored year (2016) and `make train`'s test split (2023–2025),
so no scored season chooses anything. The first candidate is each library's defaults with an
explicit learning rate; the other 13 are drawn from the grid below with a fixed seed. One seed
per fit (the served trees average several). A candidate's figures are kept under --bundle, so a
run cut short resumes.

    .venv/bin/python bench/studies/which_tree_settings.py [--bundle /tmp/deepsummit-bundle] \
        [--models LightGBM CatBoost "logistic regression"]
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared helpers

import numpy as np
import polars as pl
from _bundle import DEFAULT_BUNDLE, backtest_settings

from deepsummit.backtest.seasons import season_table
from deepsummit.contracts.preprocessing import Preprocessor
from deepsummit.contracts.snapshot import (
    PREPROCESSING_FILE,
    newest_features_dir,
    read_features,
    read_windows,
)
from deepsummit.core.baseline_sections import BaselinesConfig
from deepsummit.train.baseline_protocol import stopping_rows
from deepsummit.train.baselines import CATBOOST, LIGHTGBM, LOGISTIC, baseline_fits
from deepsummit.train.recipe import Recipe, check_inputs, preprocessing_for, training_arrays

TEST_YEARS = (2012, 2013)
CANDIDATES = 14  # bench/studies/which_training_profile.py's: the profile and 13 others
GRIDS = {
    LIGHTGBM: {
        "learning_rate": [0.02, 0.05, 0.1],
        "num_leaves": [15, 31, 63],
        "min_child_samples": [20, 100, 300],
        "feature_fraction": [0.2, 0.5, 0.8],
        "lambda_l2": [0.0, 1.0, 10.0],
        "weather": [True, False],
    },
    # rsm at most a quarter: a round on all 437 columns costs 3.4 times one on a tenth.
    CATBOOST: {
        "learning_rate": [0.03, 0.05, 0.1],
        "depth": [4, 6, 8],
        "l2_leaf_reg": [1.0, 3.0, 10.0],
        "rsm": [0.1, 0.25],
        "weather": [True, False],
    },
}
FIRST = {
    LIGHTGBM: {"learning_rate": 0.05, "num_leaves": 31, "min_child_samples": 20,
               "feature_fraction": 0.5, "lambda_l2": 0.0, "weather": True},
    CATBOOST: {"learning_rate": 0.05, "depth": 6, "l2_leaf_reg": 3.0, "rsm": 0.1, "weather": True},
}  # fmt: skip
LOGISTIC_C = np.logspace(-4, 1, CANDIDATES).round(6).tolist()
SECTION = {LIGHTGBM: "lightgbm", CATBOOST: "catboost"}


def candidates(model: str) -> list[dict]:
    """The model's 14 candidates: its first, then 13 distinct draws from its grid."""
    if model == LOGISTIC:
        return [{"logistic_c": c} for c in LOGISTIC_C]
    grid = GRIDS[model]
    every = [dict(zip(grid, values, strict=True)) for values in itertools.product(*grid.values())]
    every.remove(FIRST[model])
    return [FIRST[model], *random.Random(0).sample(every, CANDIDATES - 1)]


def config_of(model: str, candidate: dict) -> BaselinesConfig:
    if model == LOGISTIC:
        return BaselinesConfig(**candidate)
    return BaselinesConfig(**{SECTION[model]: candidate})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE)
    parser.add_argument("--models", nargs="+", default=[LIGHTGBM, CATBOOST, LOGISTIC])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    settings = backtest_settings(args.bundle)
    snapshot = newest_features_dir(settings.features.features_dir)
    features, windows = read_features(snapshot), read_windows(snapshot)
    template = Preprocessor.load(snapshot / PREPROCESSING_FILE)
    before = features.filter(pl.col("year") < TEST_YEARS[0])
    held_out = features.filter(pl.col("year").is_in(TEST_YEARS) & (pl.col("record") == "member"))
    recipe = Recipe.of(settings)
    check = check_inputs(recipe, features, windows, template, TEST_YEARS[0] - 1)
    stopping = stopping_rows(before, windows, template, held_out, check, settings.train)
    preprocessor = preprocessing_for(template, before, windows)
    train = training_arrays(preprocessor, before, windows, settings.train)
    test = preprocessor.transform(held_out, windows)
    cache = args.bundle / "tree-settings.json"
    figures = json.loads(cache.read_text()) if cache.exists() else {}
    seed = settings.train.seed
    print(f"fold: trained through {TEST_YEARS[0] - 1}, rounds counted on the members of "
          f"{stopping.years}, scored on the members of {TEST_YEARS}")  # fmt: skip
    for model in args.models:
        for candidate in candidates(model):
            key = f"{model} {json.dumps(candidate, sort_keys=True)}"
            if key not in figures:
                started = time.perf_counter()
                config = config_of(model, candidate)
                fits = baseline_fits(config, stopping.cardinalities, args.threads)
                rounds = None
                if model != LOGISTIC:
                    rounds = fits[model](stopping.train, seed, None, stopping.validation).rounds
                refit = baseline_fits(config, preprocessor.categorical_cardinalities, args.threads)
                answers = refit[model](train, seed, rounds, None).probability(test)
                auc = season_table(
                    held_out.with_columns(p=pl.Series(answers)), ("p",), 100, ()
                ).within["p"]
                figures[key] = {
                    "model": model, "candidate": candidate, "rounds": rounds,
                    "auc": auc.estimate, "low": auc.low, "high": auc.high,
                    "seconds": time.perf_counter() - started,
                }  # fmt: skip
                cache.write_text(json.dumps(figures, indent=1))
            row = figures[key]
            interval = f"{row['auc']:.4f} [{row['low']:.3f}, {row['high']:.3f}]"
            print(f"{model:20} {interval} rounds {row['rounds']} {row['seconds']:.0f}s {candidate}")
    report(figures, args.models)


def report(figures: dict, models: list[str]) -> None:
    """The winners as the config file's table, and the candidates as docs/evaluation.md's."""
    print("\n| model | candidate | rounds counted | mean within-season AUC, 2012–2013 |")
    print("| --- | --- | --- | --- |")
    best = {}
    for model in models:
        rows = [row for row in figures.values() if row["model"] == model]
        for row in sorted(rows, key=lambda r: -r["auc"]):
            settings = ", ".join(f"{k} {v}" for k, v in row["candidate"].items())
            print(f"| {model} | {settings} | {row['rounds'] or '–'} | {row['auc']:.3f} "
                  f"[{row['low']:.3f}, {row['high']:.3f}] |")  # fmt: skip
        best[model] = max(rows, key=lambda r: r["auc"])["candidate"]
    print("\n[settings.baselines]")
    if LOGISTIC in best:
        print(f"logistic_c = {best[LOGISTIC]['logistic_c']}")
    for model in (LIGHTGBM, CATBOOST):
        for name, value in best.get(model, {}).items():
            shown = str(value).lower() if isinstance(value, bool) else value
            print(f"{SECTION[model]}.{name} = {shown}")


if __name__ == "__main__":
    main()
