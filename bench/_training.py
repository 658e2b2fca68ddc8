"""The options that name a features snapshot and how to train on it, shared by the benches
that read one; not a bench (`make bench` skips it)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import torch
from _bundle import bundle_features

from deepsummit.contracts.snapshot import (
    newest_features_dir,
)
from deepsummit.core.config import Settings, load_settings, nested_overrides


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
