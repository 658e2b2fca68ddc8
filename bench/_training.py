"""Shared by bench/ablation.py and bench/calibration.py; not a bench (`make bench` skips it).

A features snapshot of the whole data bundle built without the Prefect and MLflow services, a
snapshot's arrays for any input set, the transformer trained as the train stage trains it, and
the rendering of a paired difference.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch
from _bundle import bundle_features

from deepsummit.contracts.arrays import FeatureArrays
from deepsummit.contracts.preprocessing import Preprocessor
from deepsummit.contracts.snapshot import (
    SNAPSHOT_FILE,
    SPLITS,
    load_features,
    newest_features_dir,
    read_features,
    read_windows,
)
from deepsummit.core.config import Settings, load_settings, nested_overrides
from deepsummit.core.inputs import InputSet
from deepsummit.train import recipe
from deepsummit.train.bootstrap import Interval
from deepsummit.train.trainer import TrainResult


def add_snapshot_options(parser: argparse.ArgumentParser) -> None:
    """The options that say which snapshot to read and how to train on it."""
    parser.add_argument(
        "--features", type=Path, help="a features folder (default: the newest under the settings)"
    )
    parser.add_argument(
        "--bundle",
        type=Path,
        help="build a fresh warehouse of the whole data bundle and its snapshot under this "
        "folder first (the records, weather and features stages), instead of --features",
    )
    parser.add_argument("--seeds", type=int, help="transformer seeds (default: the profile's)")
    parser.add_argument("--max-train-rows", type=int, help="train on a slice (quick runs)")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch and LightGBM threads (default 1)"
    )


def bench_settings(args: argparse.Namespace, profile: str = "cpu") -> Settings:
    """The profile's settings with the options' seeds, training slice and threads."""
    dotted = {
        "train.seeds": args.seeds,
        "train.max_train_rows": args.max_train_rows,
        "train.num_threads": args.threads,
    }
    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    return load_settings(profile, nested_overrides(dotted))


def snapshot_location(args: argparse.Namespace, settings: Settings) -> Path:
    """The features folder the options name."""
    if args.bundle is not None:
        _, report = bundle_features(args.bundle)
        return report.directory
    return args.features or newest_features_dir(settings.features.features_dir)


def input_set_arrays(
    snapshot: Path, inputs: InputSet
) -> tuple[dict[str, FeatureArrays], Preprocessor]:
    """Each split's arrays for `inputs` and their preprocessor: the snapshot's own when `inputs`
    is its input set, else a `Preprocessor` fitted on the snapshot's train rows (every declared
    input is a column of its features.parquet) with the snapshot's weather windows."""
    arrays, preprocessor = load_features(snapshot)
    if preprocessor.inputs == inputs:
        return arrays, preprocessor
    features, windows = read_features(snapshot), read_windows(snapshot)
    rows = {name: features.filter(pl.col("split") == name) for name in SPLITS}
    refit = preprocessor.refit(rows["train"], windows, inputs)
    return {name: refit.transform(frame, windows) for name, frame in rows.items()}, refit


def split_groups(snapshot: Path, split: str) -> np.ndarray:
    """Each row's expedition (expid/year) in a split, in the arrays' order: the bootstrap's
    groups, as the train stage forms them."""
    rows = pl.read_parquet(snapshot / SNAPSHOT_FILE).filter(pl.col("split") == split)
    return rows.select(pl.format("{}/{}", "expid", "year")).to_series().to_numpy()


def train_seeds(
    settings: Settings, arrays: dict[str, FeatureArrays], dimensions: dict[str, Any]
) -> list[TrainResult]:
    """The transformer trained once per seed as the train stage trains it, without logging its
    epochs to MLflow."""
    with tempfile.TemporaryDirectory() as checkpoints:
        results = recipe.train_seeds(
            recipe.Recipe.of(settings), arrays, dimensions, Path(checkpoints)
        )
    return results


def render_signed(interval: Interval) -> str:
    """A difference with its interval, signs shown ("–" where there is none)."""
    if np.isnan(interval.estimate):
        return "–"
    return f"{interval.estimate:+.4f} [{interval.low:+.4f}, {interval.high:+.4f}]"


def print_wall(started: float, load_before: tuple[float, float, float]) -> None:
    """The bench's wall time and the load average around it (other work on the cores slows the
    train seconds, never the scores)."""
    load_after = os.getloadavg()
    print(
        f"\nwall {time.perf_counter() - started:.0f} s; load average (1 min) "
        f"{load_before[0]:.1f} at start, {load_after[0]:.1f} at end"
    )
