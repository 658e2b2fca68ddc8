"""The model artifact, in one place: what a registered version holds, how it is written and read.

A version's files: `weights.pt` (the state dict), `model_config.json` (`ModelConfig`) and
`preprocessing.json` (the `Preprocessor` fitted on the training split). The pyfunc is logged
"from code" (`pipeline/serve/model_code.py`): loading a version imports that file instead of
unpickling a Python object, and tensors are read with `torch.load(weights_only=True)`, which
refuses anything but tensors and plain containers.

The pyfunc's input layout is part of the artifact's contract and is defined here too: one row
per attempt with the 20 tabular features under their names (raw values: categories as text,
booleans as 0/1, NaN/None where missing), and the weather window flattened to one column per
(token, variable) named `w07_temperature_2m_mean` (token 07 = the first three-day token), plus
`w07_days_before` and `w07_day_of_year` per token. The model applies its own vocabularies and
normalisation, so raw feature rows are all a caller needs.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import torch

from model import DeepSummitTransformer, ModelConfig
from pipeline.features.dataset import FeatureArrays
from pipeline.features.preprocessing import Preprocessor
from pipeline.features.spec import (
    BINARY_FEATURES,
    CATEGORICAL_FEATURES,
    NUMERIC_FEATURES,
    WEATHER_TOKENS,
    WEATHER_VARIABLES,
)

# The file MLflow imports to build the pyfunc of a registered version.
MODEL_CODE_FILE = Path(__file__).parents[1] / "serve" / "model_code.py"

TABULAR_COLUMNS: tuple[str, ...] = (*NUMERIC_FEATURES, *CATEGORICAL_FEATURES, *BINARY_FEATURES)
TIME_FIELDS: tuple[str, ...] = ("days_before", "day_of_year")


def save_tensors(path: Path, state: dict[str, Any]) -> None:
    """Write atomically: a crash mid-write leaves the previous file intact."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(path.suffix + ".partial")
    torch.save(state, partial)
    os.replace(partial, path)


def load_tensors(path: Path) -> dict[str, Any]:
    """Tensors and plain containers only; anything else is refused, never executed."""
    return torch.load(path, map_location="cpu", weights_only=True)


@dataclass(frozen=True)
class ModelFiles:
    """The artifacts of one model version, in a folder (before logging, or after download)."""

    weights: Path
    model_config: Path
    preprocessing: Path

    @classmethod
    def in_directory(cls, directory: Path) -> ModelFiles:
        return cls(
            directory / "weights.pt",
            directory / "model_config.json",
            directory / "preprocessing.json",
        )

    @classmethod
    def from_artifacts(cls, artifacts: dict[str, str]) -> ModelFiles:
        """The files of a loaded pyfunc (MLflow's `context.artifacts`)."""
        return cls(**{name: Path(path) for name, path in artifacts.items()})

    def as_artifacts(self) -> dict[str, str]:
        return {name: str(path) for name, path in asdict(self).items()}

    def load(self) -> tuple[DeepSummitTransformer, Preprocessor]:
        model = DeepSummitTransformer(ModelConfig(**json.loads(self.model_config.read_text())))
        model.load_state_dict(load_tensors(self.weights))
        return model.eval(), Preprocessor.load(self.preprocessing)


def write_model_files(
    directory: Path, model: DeepSummitTransformer, preprocessor: Preprocessor
) -> ModelFiles:
    directory.mkdir(parents=True, exist_ok=True)
    files = ModelFiles.in_directory(directory)
    save_tensors(files.weights, model.state_dict())
    files.model_config.write_text(json.dumps(asdict(model.config), indent=2))
    preprocessor.save(files.preprocessing)
    return files


def token_column(token: int, field: str) -> str:
    return f"w{token:02d}_{field}"


WEATHER_COLUMNS: tuple[str, ...] = tuple(
    token_column(t, v) for t in range(WEATHER_TOKENS) for v in (*WEATHER_VARIABLES, *TIME_FIELDS)
)
INPUT_COLUMNS: tuple[str, ...] = (*TABULAR_COLUMNS, *WEATHER_COLUMNS)


def model_input_frame(
    rows: pl.DataFrame, arrays: FeatureArrays, preprocessor: Preprocessor
) -> pd.DataFrame:
    """Feature rows (raw tabular values, as in the features snapshot) and their model arrays →
    the pyfunc's input. The snapshot keeps no raw windows, so the weather is un-normalised
    from the arrays with the preprocessor's statistics (exact up to float32 rounding)."""
    mean, std = preprocessor.weather.arrays(WEATHER_VARIABLES)
    weather = np.where(arrays.weather_missing, np.nan, arrays.weather * std + mean)
    per_token = np.concatenate(
        [weather, arrays.days_before[..., None], arrays.day_of_year[..., None]], axis=-1
    )  # (N, 26, 17): the variables, then days_before, day_of_year: WEATHER_COLUMNS' order
    frame = rows.select(
        pl.col(NUMERIC_FEATURES).cast(pl.Float64),
        pl.col(CATEGORICAL_FEATURES).cast(pl.String),
        pl.col(BINARY_FEATURES).cast(pl.Float64),
    ).to_pandas()
    window = pd.DataFrame(per_token.reshape(len(arrays), -1), columns=list(WEATHER_COLUMNS))
    return pd.concat([frame, window], axis=1)[list(INPUT_COLUMNS)]


def split_model_input(frame: pd.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The pyfunc's input back into (feature rows, long windows) for `Preprocessor.transform`."""
    missing = [name for name in INPUT_COLUMNS if name not in frame.columns]
    if missing:
        raise ValueError(f"model input lacks column(s): {', '.join(missing[:5])}")
    rows = pl.from_pandas(frame[list(INPUT_COLUMNS)].reset_index(drop=True)).with_row_index("row")
    # Each row gets its own window key (row number as the date), so rows never share weather.
    key = pl.lit(dt.date(1970, 1, 1)) + pl.duration(days=pl.col("row"))
    features = rows.select(
        key.alias("smtdate"),
        pl.col(NUMERIC_FEATURES).cast(pl.Float64),
        pl.col(CATEGORICAL_FEATURES).cast(pl.String),
        pl.col(BINARY_FEATURES).cast(pl.Float64),
    )
    windows = pl.concat(
        [
            rows.select(
                pl.col("peakid").cast(pl.String),
                key.alias("date"),
                pl.lit(t, pl.Int32).alias("token"),
                *(
                    pl.col(token_column(t, field)).cast(pl.Float64).alias(field)
                    for field in (*WEATHER_VARIABLES, *TIME_FIELDS)
                ),
            )
            for t in range(WEATHER_TOKENS)
        ]
    )
    return features, windows
