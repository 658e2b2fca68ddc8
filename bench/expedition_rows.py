"""How an expedition record enters training: one attempt per climbing member it counts (what the
features stage writes), or one row per outcome with a binomial weight.

An expedition without member rows says that `smtmembers` of its `totmembers` climbing members
summited. Its attempts are alike but for the label, so the likelihood of its counted members is
the same written either way: `totmembers` rows of weight 1, or two rows (summited, not) weighted
by their counts. The two differ in what a training step sees (the weighted rows come in fewer,
heavier batches) and in what an epoch costs. This trains the profile's transformer both ways on
the same snapshot and scores both on the same test rows (the expedition records of the newest
seasons, by expedition: deepsummit/train/expeditions.py), with the epoch seconds of each.

    .venv/bin/python bench/expedition_rows.py --bundle /tmp/deepsummit-bundle --threads 2
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

import numpy as np
import polars as pl
from _training import (
    add_snapshot_options,
    bench_settings,
    print_wall,
    snapshot_location,
    train_seeds,
)

from deepsummit.contracts.arrays import FeatureArrays
from deepsummit.contracts.calibration import Calibrator
from deepsummit.train.comparison import logit
from deepsummit.train.expeditions import expedition_table
from deepsummit.train.recipe import transformer_predictions
from deepsummit.train.stage import TrainingData

EXPANDED, WEIGHTED = "one row per member", "one weighted row per outcome"


def binomial_rows(arrays: FeatureArrays, rows: pl.DataFrame) -> FeatureArrays:
    """The expedition records' attempts collapsed to one row per (expedition, outcome), weighted
    by how many members it stands for; member rows as they are."""
    keyed = rows.with_row_index("position").with_columns(
        group=pl.when(pl.col("record") == "expedition")
        .then(pl.format("{}/{}/{}", "expid", "year", "label"))
        .otherwise(pl.format("member {}", "position"))
    )
    kept = keyed.group_by("group", maintain_order=True).agg(
        pl.col("position").first(), count=pl.len()
    )
    collapsed = arrays.subset(kept["position"].to_numpy())
    weight = collapsed.weight * kept["count"].to_numpy().astype(np.float32)
    return dataclasses.replace(collapsed, weight=weight)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_snapshot_options(parser)
    args = parser.parse_args()
    started, load = time.perf_counter(), os.getloadavg()
    settings = bench_settings(args)
    data = TrainingData.read(snapshot_location(args, settings))
    arrays = data.training_arrays(settings.train)
    arms = {
        EXPANDED: arrays,
        WEIGHTED: {**arrays, "train": binomial_rows(arrays["train"], data.rows["train"])},
    }
    columns, costs = {}, {}
    for name, arm in arms.items():
        results = train_seeds(settings, arm, data.preprocessor.model_dimensions())
        predictions = transformer_predictions(results, data.arrays)
        calibrator = Calibrator.fit(
            settings.train.calibration,
            logit(predictions.validation),
            data.arrays["validation"].label,
        )
        columns[name] = calibrator.probabilities(logit(predictions.test))
        epochs = [record.seconds for r in results for record in r.history]
        costs[name] = (len(arm["train"]), float(np.median(epochs)))
    test = data.rows["test"].select("expid", "year", "season", "record", "label")
    rows = test.with_columns(**{n: pl.Series(v) for n, v in columns.items()})
    table = expedition_table(
        rows.filter(pl.col("record") == "expedition"), (EXPANDED, WEIGHTED), 30, {}
    )
    print(table.markdown())
    for name, (count, seconds) in costs.items():
        print(f"{name}: {count:,} training rows, median epoch {seconds:.1f} s")
    print_wall(started, load)


if __name__ == "__main__":
    main()
