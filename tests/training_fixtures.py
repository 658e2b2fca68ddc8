"""Synthetic model inputs with a learnable signal, for the training/evaluation/baseline tests.

The label depends on one numeric feature, one category and the attempt day's first weather
variable, so a model that learns anything scores well above AUC 0.5, and one that is broken
(constant output) scores exactly 0.5.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from mlflow import MlflowClient

from pipeline.config import Settings, load_settings
from pipeline.context import RunContext
from pipeline.features.build import PREPROCESSING_FILE, SNAPSHOT_FILE
from pipeline.features.dataset import FeatureArrays
from pipeline.features.preprocessing import Preprocessor
from pipeline.features.spec import (
    BINARY_FEATURES,
    CATEGORICAL_FEATURES,
    NUMERIC_FEATURES,
    WEATHER_TOKENS,
    WEATHER_VARIABLES,
)
from pipeline.features.tabular import TABULAR_FEATURES
from pipeline.features.windows import window_days
from pipeline.train.stage import TrainReport, train_and_register
from pipeline.warehouse import frame_digest

CARDINALITIES: tuple[int, ...] = (6, 5, 4, 5, 3, 4)


def synthetic_arrays(n: int, seed: int) -> FeatureArrays:
    rng = np.random.default_rng(seed)
    numeric = rng.normal(size=(n, len(NUMERIC_FEATURES))).astype(np.float32)
    numeric_missing = rng.random((n, len(NUMERIC_FEATURES))) < 0.1
    numeric[numeric_missing] = 0.0
    categorical = np.stack([rng.integers(0, size, n) for size in CARDINALITIES], axis=1)
    binary = rng.integers(0, 2, (n, len(BINARY_FEATURES)))
    binary_missing = rng.random((n, len(BINARY_FEATURES))) < 0.05
    binary[binary_missing] = 0
    weather = rng.normal(size=(n, WEATHER_TOKENS, len(WEATHER_VARIABLES))).astype(np.float32)
    weather_missing = np.zeros_like(weather, dtype=bool)
    days_before = np.tile(np.arange(WEATHER_TOKENS, dtype=np.float32)[::-1], (n, 1))
    day_of_year = np.tile(rng.integers(1, 366, (n, 1)), (1, WEATHER_TOKENS)).astype(np.float32)
    signal = 3.0 * numeric[:, 0] + 2.0 * (categorical[:, 0] == 1) - 2.0 * weather[:, 6, 0]
    label = (rng.random(n) < 1 / (1 + np.exp(-signal))).astype(np.float32)
    assert len(CATEGORICAL_FEATURES) == len(CARDINALITIES)
    return FeatureArrays(
        numeric=numeric,
        numeric_missing=numeric_missing,
        categorical=categorical.astype(np.int64),
        binary=binary.astype(np.int64),
        binary_missing=binary_missing,
        weather=weather,
        weather_missing=weather_missing,
        days_before=days_before,
        day_of_year=day_of_year,
        label=label,
    )


def synthetic_features_dir(directory: Path, n: int = 1200, seed: int = 0) -> Path:
    """A features folder in the layout the features stage writes (snapshot, preprocessing.json,
    one .npz per split), built from raw rows through the real `Preprocessor`. Years 2000–2011
    are train, 2012–2014 validation, 2015–2017 test; the label depends on age, nationality and
    the attempt day's temperature."""
    rng = np.random.default_rng(seed)
    peaks = ["EVER", "CHOY", "AMAD", "MANA"]
    year = rng.integers(2000, 2018, n)
    smtdate = [
        dt.date(int(y), 5, 1) + dt.timedelta(days=int(d))
        for y, d in zip(year, rng.integers(0, 40, n), strict=True)
    ]
    nationality = rng.choice(
        ["Nepal", "USA", "France", "Japan", "Atlantis"], n, p=[0.3, 0.3, 0.2, 0.199, 0.001]
    )
    age = rng.normal(38, 10, n)
    rows = pl.DataFrame(
        {
            "expid": [f"X{i:05d}" for i in range(n)],
            "member_id": [f"X{i:05d}-01" for i in range(n)],
            "year": year.astype(np.int32),
            "smtdate": smtdate,
            "peakid": rng.choice(peaks, n),
            "age": np.where(rng.random(n) < 0.1, np.nan, age),
            **{name: rng.normal(size=n) for name in NUMERIC_FEATURES[1:]},
            "nationality": nationality,
            "route1": pl.Series(
                rng.choice(["S Col-SE Ridge", "NW Ridge", None], n).tolist(), dtype=pl.String
            ),
            "himal": rng.choice(["12", "13"], n),
            "season": "Spring",
            "style": "Standard",
            **{name: rng.integers(0, 2, n).astype(np.int32) for name in BINARY_FEATURES},
        }
    ).with_columns(pl.col("age").fill_nan(None))
    windows = _synthetic_windows(rows, rng)
    attempt_day = (
        windows.filter(pl.col("token") == 6)
        .select("peakid", pl.col("date").alias("smtdate"), pl.col("temperature_2m_mean").alias("t"))
        .unique(["peakid", "smtdate"])
    )
    rows = rows.join(attempt_day, on=["peakid", "smtdate"], how="left", maintain_order="left")
    signal = (
        -0.12 * (rows["age"].fill_null(38).to_numpy() - 38)
        + 1.5 * (rows["nationality"] == "Nepal").to_numpy()
        + 0.8 * rows["t"].to_numpy()
        - 0.5
    )
    label = rng.random(n) < 1 / (1 + np.exp(-signal))
    split = np.where(year <= 2011, "train", np.where(year <= 2014, "validation", "test"))
    features = (
        rows.drop("t")
        .with_columns(
            pl.lit("archive").alias("weather_source"),
            pl.Series("split", split),
            pl.Series("label", label),
        )
        .select(
            "expid",
            "member_id",
            "year",
            "smtdate",
            "weather_source",
            "split",
            "label",
            *TABULAR_FEATURES,
        )
        .sort("year", "expid")
    )
    preprocessor = Preprocessor.fit(
        features.filter(pl.col("split") == "train"),
        windows,
        "archive",
        min_category_count=5,
        extra={"digest": frame_digest(features), "success_rate_prior_strength": 20.0},
    )
    directory.mkdir(parents=True, exist_ok=True)
    features.write_parquet(directory / SNAPSHOT_FILE)
    preprocessor.save(directory / PREPROCESSING_FILE)
    for name in ("train", "validation", "test"):
        part = features.filter(pl.col("split") == name)
        preprocessor.transform(part, windows).save(directory / f"{name}.npz")
    return directory


def _synthetic_windows(rows: pl.DataFrame, rng: np.random.Generator) -> pl.DataFrame:
    """Long windows (one row per token) for every (peakid, smtdate) of `rows`, like the
    features stage's `weather_windows`; wind gusts are missing on a few tokens."""
    keys = rows.select("peakid", pl.col("smtdate").alias("date")).unique().sort("peakid", "date")
    days_before = window_days().group_by("token").agg(pl.col("days_before").mean()).sort("token")
    frame = keys.join(days_before, how="cross").with_columns(
        pl.col("token").cast(pl.Int32),
        (pl.col("date") - pl.duration(days=pl.col("days_before").round()))
        .dt.ordinal_day()
        .cast(pl.Float64)
        .alias("day_of_year"),
    )
    values = {name: rng.normal(size=frame.height) for name in WEATHER_VARIABLES}
    values["wind_gusts_10m_max"] = np.where(
        rng.random(frame.height) < 0.05, np.nan, values["wind_gusts_10m_max"]
    )
    return frame.with_columns(
        pl.Series(name, value).fill_nan(None) for name, value in values.items()
    )


@dataclass(frozen=True)
class TrainedRegistry:
    """A temporary MLflow store (SQLite + artifact folder) holding one trained champion."""

    root: Path
    settings: Settings
    features_dir: Path
    report: TrainReport

    @property
    def model_dir(self) -> Path:
        return self.root / "run" / "model"


def registry_settings(root: Path) -> Settings:
    """Tiny-profile settings tracking into `root` (the experiment's artifacts go there too)."""
    settings = load_settings(
        "tiny",
        overrides={
            "mlflow": {"tracking_uri": f"sqlite:///{root}/mlflow.db"},
            "train": {
                "checkpoint_dir": str(root / "checkpoints"),
                "learning_rate": 1e-2,
                "max_epochs": 3,
                "num_threads": 1,
            },
        },
    )
    client = MlflowClient(settings.mlflow.tracking_uri)
    if client.get_experiment_by_name(settings.mlflow.experiment) is None:
        client.create_experiment(
            settings.mlflow.experiment, artifact_location=(root / "artifacts").as_uri()
        )
    return settings


@pytest.fixture(scope="session", name="trained_registry")
def trained_registry_fixture(tmp_path_factory: pytest.TempPathFactory) -> TrainedRegistry:
    root = tmp_path_factory.mktemp("registry")
    features_dir = synthetic_features_dir(root / "features")
    settings = registry_settings(root)
    run = RunContext(root / "run", tags={"prefect.flow_run_id": "flow-run-123"})
    report = train_and_register(settings, run, features_snapshot=features_dir)
    return TrainedRegistry(root, settings, features_dir, report)
