"""Shared by bench/ablation.py and bench/calibration.py; not a bench (`make bench` skips it).

A features snapshot of the whole data bundle built without the Prefect and MLflow services, a
snapshot's arrays for any input set, the transformer trained as the train stage trains it, and
the rendering of a paired difference.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import polars as pl
import torch

from pipeline.config import Settings, load_settings, nested_overrides
from pipeline.context import RunContext
from pipeline.features.build import (
    SNAPSHOT_FILE,
    build_features,
    load_features,
    newest_features_dir,
)
from pipeline.features.dataset import FeatureArrays
from pipeline.features.preprocessing import Preprocessor
from pipeline.features.spec import InputSet
from pipeline.features.validation import SPLITS
from pipeline.train import stage
from pipeline.train.bootstrap import Interval
from pipeline.train.stage import registered_first
from pipeline.train.trainer import TrainResult
from pipeline.warehouse import connect

# After the pipeline's imports: tests/model (a folder of tests) would shadow the model package.
sys.path.append(str(Path(__file__).resolve().parents[1] / "tests"))
from features_tables import load_bundle


def add_snapshot_options(parser: argparse.ArgumentParser) -> None:
    """The options that say which snapshot to read and how to train on it."""
    parser.add_argument(
        "--features", type=Path, help="a features folder (default: the newest under the settings)"
    )
    parser.add_argument(
        "--warehouse",
        type=Path,
        help="the warehouse that folder was built from, for its weather windows (default: the "
        "settings'); read only to refit another input set",
    )
    parser.add_argument(
        "--bundle",
        type=Path,
        help="build a fresh warehouse of the whole data bundle and its snapshot under this "
        "folder first (tests/features_tables.py), instead of --features/--warehouse",
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


def snapshot_location(args: argparse.Namespace, settings: Settings) -> tuple[Path, Path]:
    """(features folder, its warehouse) the options name."""
    if args.bundle is not None:
        return bundle_snapshot(args.bundle)
    features = args.features or newest_features_dir(settings.features.features_dir)
    return features, args.warehouse or settings.paths.warehouse


def bundle_snapshot(directory: Path) -> tuple[Path, Path]:
    """A new warehouse holding the whole data bundle (the contract tables the tests load) and
    the features snapshot the cpu profile builds from it, both under `directory`; MLflow points
    at a file store there, so no service is asked for a champion."""
    directory = directory.resolve()
    warehouse = directory / "warehouse.duckdb"
    warehouse.unlink(missing_ok=True)
    warehouse.parent.mkdir(parents=True, exist_ok=True)
    with duckdb.connect(str(warehouse)) as con:
        load_bundle(con)
    overrides = {
        "paths": {
            "warehouse": str(warehouse),
            "var_dir": str(directory),
            "runs_dir": str(directory / "runs"),
        },
        "features": {"features_dir": str(directory / "features")},
        "mlflow": {"tracking_uri": f"sqlite:///{directory / 'mlflow.db'}"},
    }
    report = build_features(load_settings("cpu", overrides), RunContext(directory / "runs"))
    return report.directory, warehouse


def input_set_arrays(
    snapshot: Path, warehouse: Path, inputs: InputSet
) -> tuple[dict[str, FeatureArrays], Preprocessor]:
    """Each split's arrays for `inputs` and their preprocessor: the snapshot's own when `inputs`
    is its input set, else a `Preprocessor` fitted on the snapshot's train rows (every declared
    input is a column of its features.parquet) with the weather windows of the warehouse it was
    built from. The refitted weather arrays must equal the snapshot's: the same windows."""
    arrays, preprocessor = load_features(snapshot)
    if preprocessor.inputs == inputs:
        return arrays, preprocessor
    features = pl.read_parquet(snapshot / SNAPSHOT_FILE)
    with connect(warehouse, read_only=True) as con:
        windows = con.table("weather_windows").pl()
    windows = windows.filter(pl.col("source") == preprocessor.weather_source)
    rows = {name: features.filter(pl.col("split") == name) for name in SPLITS}
    refit = Preprocessor.fit(
        rows["train"],
        windows,
        inputs,
        preprocessor.weather_source,
        preprocessor.min_category_count,
        preprocessor.extra,
    )
    refitted = {name: refit.transform(frame, windows) for name, frame in rows.items()}
    for name, split in refitted.items():
        if not np.array_equal(split.weather, arrays[name].weather):
            raise SystemExit(f"{warehouse}: its weather windows are not those of {snapshot}")
    return refitted, refit


def split_groups(snapshot: Path, split: str) -> np.ndarray:
    """Each row's expedition (expid/year) in a split, in the arrays' order: the bootstrap's
    groups, as the train stage forms them."""
    rows = pl.read_parquet(snapshot / SNAPSHOT_FILE).filter(pl.col("split") == split)
    return rows.select(pl.format("{}/{}", "expid", "year")).to_series().to_numpy()


def train_seeds(
    settings: Settings, arrays: dict[str, FeatureArrays], dimensions: dict[str, Any]
) -> list[TrainResult]:
    """The transformer trained once per seed as the train stage trains it, without logging its
    epochs to MLflow, the one it registers (best validation AUC) first."""
    with tempfile.TemporaryDirectory() as checkpoints:
        results = stage.train_seeds(
            settings.train,
            settings.model,
            arrays,
            dimensions,
            Path(checkpoints),
            epoch_log=lambda record, prefix: None,
        )
    return registered_first(results)


def render_signed(interval: Interval) -> str:
    """A difference with its interval, signs shown."""
    return f"{interval.estimate:+.4f} [{interval.low:+.4f}, {interval.high:+.4f}]"


def print_wall(started: float, load_before: tuple[float, float, float]) -> None:
    """The bench's wall time and the load average around it (other work on the cores slows the
    train seconds, never the scores)."""
    load_after = os.getloadavg()
    print(
        f"\nwall {time.perf_counter() - started:.0f} s; load average (1 min) "
        f"{load_before[0]:.1f} at start, {load_after[0]:.1f} at end"
    )
