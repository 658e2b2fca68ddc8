"""A features snapshot: the folder the features stage writes and the train, drift and backtest
stages read, one per content digest (`<features_dir>/<digest[:12]>/`: a link to the generation of
that snapshot written last, so that a rebuild replaces it whole, in one rename:
deepsummit/features/generations.py).

    features.parquet          the features table: every attempt, every declared input, its split
    windows.parquet           the weather windows of those attempts (26 tokens per peak and date)
    train/validation/test.npz `FeatureArrays` of the configured input set, per split
    preprocessing.json        the `Preprocessor` fitted on the train rows, with the split, the
                              weather source and the digests
    history/<table>.parquet   what a registered model freezes so that serving computes features
                              as training did
    planned_test.parquet      the test split as the registered model is asked for it
    drift_profile.json        the training split's input distributions (the drift reference)
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from deepsummit.contracts.arrays import FeatureArrays
from deepsummit.contracts.preprocessing import Preprocessor
from deepsummit.core.errors import PipelineError

SPLITS = ("train", "validation", "test")
PREPROCESSING_FILE = "preprocessing.json"
SNAPSHOT_FILE = "features.parquet"
WINDOWS_FILE = "windows.parquet"
HISTORY_DIR = "history"
PLANNED_TEST_FILE = "planned_test.parquet"


def load_history(directory: Path) -> dict[str, pl.DataFrame]:
    """The history tables a snapshot was built with (what a model freezes)."""
    return {p.stem: pl.read_parquet(p) for p in sorted((directory / HISTORY_DIR).glob("*.parquet"))}


def newest_features_dir(root: Path) -> Path:
    """The most recently written features folder under `root` (staging folders excluded: a
    version before generations wrote `<digest[:12]>.partial` first)."""
    folders = [
        p.parent
        for p in root.glob(f"*/{PREPROCESSING_FILE}")
        if not p.parent.name.endswith(".partial")
    ]
    if not folders:
        raise PipelineError(f"{root}: no features snapshot; run `deepsummit features` first")
    return max(folders, key=lambda p: p.stat().st_mtime)


def load_features(directory: Path) -> tuple[dict[str, FeatureArrays], Preprocessor]:
    """The model arrays per split and the preprocessor of a features folder."""
    if not (directory / PREPROCESSING_FILE).exists():
        raise PipelineError(f"{directory}: not a features folder (no {PREPROCESSING_FILE})")
    arrays = {name: FeatureArrays.load(directory / f"{name}.npz") for name in SPLITS}
    return arrays, Preprocessor.load(directory / PREPROCESSING_FILE)


def read_features(directory: Path) -> pl.DataFrame:
    """The features table of a snapshot (every attempt, with its split)."""
    return pl.read_parquet(directory / SNAPSHOT_FILE)


def read_windows(directory: Path) -> pl.DataFrame:
    """The weather windows of a snapshot's attempts."""
    return pl.read_parquet(directory / WINDOWS_FILE)
