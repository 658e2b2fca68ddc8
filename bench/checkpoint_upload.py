"""What uploading a training's checkpoint to the MLflow tracking server costs
(deepsummit/train/checkpoint_store.py): its size, and the seconds of one upload and of the
download a rescheduled training starts with, for the `cpu` profile's model and the spec's `base`.

A local MLflow server is started on a free port as `deepsummit up` starts it (artifacts proxied,
`mlflow-artifacts:/`, stored under a temporary folder), and stopped at the end. Each profile's
checkpoint is that of one real epoch of `train_model` on random rows (the optimiser's moments
and the kept weights filled, as in any later epoch); the model's embeddings have the
vocabularies of `--cardinalities` (the bundle's are of this order). Prints a markdown table:
parameters, checkpoint MB, median upload s and download s over `--repeats`.

    .venv/bin/python bench/checkpoint_upload.py [--repeats 5] [--profiles cpu base]
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from deepsummit.contracts.arrays import FeatureArrays
from deepsummit.core.config import Settings, load_settings
from deepsummit.core.inputs import SPEC_INPUT_SET, WEATHER_CHANNELS, WEATHER_TOKENS
from deepsummit.model.summary import count_parameters
from deepsummit.services import supervisor as services
from deepsummit.train.checkpoint import CHECKPOINT_FILE
from deepsummit.train.checkpoint_store import UploadedCheckpoint, training_key
from deepsummit.train.trainer import train_model

ROWS = 512


def random_arrays(rows: int, cardinalities: tuple[int, ...], seed: int) -> FeatureArrays:
    rng = np.random.default_rng(seed)
    n_numeric, n_binary = len(SPEC_INPUT_SET.numeric), len(SPEC_INPUT_SET.binary)
    weather = (rows, WEATHER_TOKENS, len(WEATHER_CHANNELS))
    return FeatureArrays(
        numeric=rng.normal(size=(rows, n_numeric)).astype(np.float32),
        numeric_missing=np.zeros((rows, n_numeric), bool),
        categorical=np.stack([rng.integers(0, size, rows) for size in cardinalities], axis=1),
        binary=rng.integers(0, 2, (rows, n_binary)),
        binary_missing=np.zeros((rows, n_binary), bool),
        weather=rng.normal(size=weather).astype(np.float32),
        weather_missing=np.zeros(weather, bool),
        days_before=np.tile(np.arange(WEATHER_TOKENS, dtype=np.float32)[::-1], (rows, 1)),
        day_of_year=np.full((rows, WEATHER_TOKENS), 120, np.float32),
        label=(rng.random(rows) < 0.5).astype(np.float32),
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def server_overrides(root: Path) -> dict:
    port = free_port()
    return {
        "paths": {"var_dir": str(root / "var")},
        "services": {"run_dir": str(root / "services"), "mlflow_port": port},
        "mlflow": {"tracking_uri": f"http://127.0.0.1:{port}", "experiment": "bench"},
    }


def measure(
    profile: str, overrides: dict, cardinalities: tuple[int, ...], repeats: int, root: Path
) -> str:
    settings = load_settings(
        profile,
        {**overrides, "train": {"max_epochs": 1, "device": "cpu", "checkpoint_upload_every": 1}},
    )
    train, validation = random_arrays(ROWS, cardinalities, 1), random_arrays(ROWS, cardinalities, 2)
    dimensions = {
        "n_numeric": len(SPEC_INPUT_SET.numeric),
        "n_binary": len(SPEC_INPUT_SET.binary),
        "categorical_cardinalities": cardinalities,
        "n_weather_vars": len(WEATHER_CHANNELS),
    }
    folder = root / profile
    result = train_model(
        settings.train, settings.model, train, validation, dimensions, folder / "worker-a"
    )
    checkpoint = folder / "worker-a" / CHECKPOINT_FILE
    signature = f"bench-{profile}-{time.time_ns()}"
    uploaded = UploadedCheckpoint(
        settings.mlflow, training_key(signature, train, validation), signature, profile
    )
    uploads, downloads = [], []
    for attempt in range(repeats):
        started = time.perf_counter()
        uploaded.upload(checkpoint, epoch=attempt + 1)
        uploads.append(time.perf_counter() - started)
        started = time.perf_counter()
        fetched = UploadedCheckpoint(uploaded.config, uploaded.key, signature, profile).fetch(
            folder / f"worker-b-{attempt}" / CHECKPOINT_FILE
        )
        downloads.append(time.perf_counter() - started)
        assert fetched is not None, "the upload was not found"
    return (
        f"| {profile} | {count_parameters(result.model):,} | "
        f"{checkpoint.stat().st_size / 1e6:.1f} | {statistics.median(uploads):.2f} "
        f"({min(uploads):.2f}–{max(uploads):.2f}) | {statistics.median(downloads):.2f} "
        f"({min(downloads):.2f}–{max(downloads):.2f}) |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--profiles", nargs="+", default=["cpu", "base"])
    parser.add_argument(
        "--cardinalities",
        type=int,
        nargs=len(SPEC_INPUT_SET.categorical),
        default=(480, 220, 5, 60, 12, 4),
        help="the vocabulary size of each categorical input",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"  # one table, no bars
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        overrides = server_overrides(root)
        settings: Settings = load_settings("tiny", overrides)
        try:
            services.start_service(settings, services.MLFLOW_SERVER, 120)
            print(f"MLflow server {settings.mlflow.tracking_uri}, artifacts proxied to {root}\n")
            print("| profile | parameters | checkpoint MB | upload s (min–max) | download s |")
            print("| --- | ---: | ---: | ---: | ---: |")
            for profile in args.profiles:
                line = measure(profile, overrides, tuple(args.cardinalities), args.repeats, root)
                print(line, flush=True)
        finally:
            services.down(settings)


if __name__ == "__main__":
    main()
