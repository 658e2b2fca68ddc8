"""How many boosting rounds the tree baselines get: a fixed budget, as the transformer's epochs
are, chosen on folds before the backtest's scored ones.

Each fold answers one test year as the backtest does (deepsummit/backtest/folds.py): the trees
trained on every season before it, with their rows' weights. For each budget: the mean over the
folds of the within-season AUC of the test year's member rows, and of |mean P − summit rate|
of the test year. LightGBM's budgets are read off one model (its first N trees are a model of
N rounds at the same learning rate); CatBoost picks its learning rate from its number of
iterations, so each of its budgets trains a model of its own. Default folds: test years 2010,
2012, 2013 (before the backtest of record's 2016, and not the disaster seasons 2014–15).

    .venv/bin/python bench/tree_budgets.py [--years 2010 2012 2013] [--catboost 100 200 400]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

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
from deepsummit.train.baselines import (
    catboost_classifier,
    catboost_frame,
    categorical_columns,
    lightgbm_classifier,
    tree_matrix,
)
from deepsummit.train.recipe import preprocessing_for


def fold_arrays(features: pl.DataFrame, windows: pl.DataFrame, template: Preprocessor, year: int):
    before = features.filter(pl.col("year") < year)
    test_rows = features.filter(pl.col("year") == year)
    preprocessor = preprocessing_for(template, before, windows)
    return (
        preprocessor.transform(before, windows),
        preprocessor.transform(test_rows, windows),
        test_rows.select("expid", "member_id", "year", "season", "record", "label"),
    )


def judged(rows: pl.DataFrame, probability: np.ndarray) -> tuple[float, float]:
    """(within-season AUC of the member rows, |mean P − summit rate|) of one test year."""
    scored = rows.with_columns(p=pl.Series(probability))
    members = scored.filter(pl.col("record") == "member")
    auc = season_table(members, ("p",), 100, ()).within["p"].estimate
    return auc, abs(float(scored["p"].mean()) - float(scored["label"].cast(pl.Float64).mean()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE)
    parser.add_argument("--years", type=int, nargs="+", default=[2010, 2012, 2013])
    parser.add_argument(
        "--lightgbm", type=int, nargs="+", default=[50, 100, 200, 300, 400, 600, 800]
    )
    parser.add_argument("--catboost", type=int, nargs="+", default=[100, 200, 400])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    settings = backtest_settings(args.bundle)
    snapshot = newest_features_dir(settings.features.features_dir)
    features, windows = read_features(snapshot), read_windows(snapshot)
    template = Preprocessor.load(snapshot / PREPROCESSING_FILE)
    figures: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
    for year in args.years:
        train, test, rows = fold_arrays(features, windows, template, year)
        started = time.perf_counter()
        booster = lightgbm_classifier(settings.train.seed, args.threads, max(args.lightgbm))
        booster.fit(
            tree_matrix(train),
            train.label,
            sample_weight=train.weight,
            categorical_feature=categorical_columns(train),
        )
        seconds = time.perf_counter() - started
        for rounds in args.lightgbm:
            p = booster.predict_proba(tree_matrix(test), num_iteration=rounds)[:, 1]
            share = seconds * rounds / max(args.lightgbm)
            figures.setdefault(("LightGBM", rounds), []).append((*judged(rows, p), share))
        for rounds in args.catboost:
            started = time.perf_counter()
            trees = catboost_classifier(settings.train.seed, args.threads, rounds).fit(
                catboost_frame(train),
                train.label,
                cat_features=categorical_columns(train),
                sample_weight=train.weight,
            )
            seconds = time.perf_counter() - started
            p = trees.predict_proba(catboost_frame(test))[:, 1]
            figures.setdefault(("CatBoost", rounds), []).append((*judged(rows, p), seconds))
        print(f"fold {year} done", flush=True)
    print(f"\nfolds testing {', '.join(map(str, args.years))}; means over the folds\n")
    print("| model | rounds | within-season AUC, member rows | mean P gap | train s per fold |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for (name, rounds), values in figures.items():
        auc, gap, seconds = np.mean(values, axis=0)
        print(f"| {name} | {rounds} | {auc:.4f} | {gap:.3f} | {seconds:.0f} |")


if __name__ == "__main__":
    main()
