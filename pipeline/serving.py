"""The registered model as an MLflow pyfunc, and scoring a planned attempt with the champion.

Input of the pyfunc: one row per attempt, in the layout of the features snapshot: the 20
tabular features under their names (raw values, not normalised: categories as text,
booleans as 0/1, NaN/None where missing), and the weather window flattened to one column per
(token, variable) named `w07_temperature_2m_mean` (token 07 = the first three-day token), plus
`w07_days_before` and `w07_day_of_year` per token. The model applies its own vocabularies and
normalisation (the `preprocessing` artifact), so raw feature rows are all a caller needs.
Output: P(summit) per row.

The pyfunc is logged "from code" (`pipeline/serving_model.py`): loading it imports this module
instead of unpickling a Python object, and the weights are read with `weights_only=True`.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import duckdb
import mlflow
import numpy as np
import pandas as pd
import polars as pl
import torch

from model import DeepSummitTransformer, ModelConfig
from pipeline.config import Settings
from pipeline.dataset import FeatureArrays, to_tensors
from pipeline.errors import PipelineError
from pipeline.feature_spec import (
    BINARY_FEATURES,
    CATEGORICAL_FEATURES,
    NUMERIC_FEATURES,
    WEATHER_TOKENS,
    WEATHER_VARIABLES,
    WINDOW_DAYS,
    WINDOW_SCALES,
)
from pipeline.preprocessing import Preprocessor
from pipeline.tabular import ATTEMPT_INPUT_SCHEMA, attempt_features
from pipeline.training import load_tensors, predict_proba, save_tensors
from pipeline.warehouse import connect, query
from pipeline.windows import window_for

SERVING_MODEL_FILE = Path(__file__).with_name("serving_model.py")
TABULAR_COLUMNS: tuple[str, ...] = (*NUMERIC_FEATURES, *CATEGORICAL_FEATURES, *BINARY_FEATURES)
TIME_FIELDS: tuple[str, ...] = ("days_before", "day_of_year")


def token_column(token: int, field: str) -> str:
    return f"w{token:02d}_{field}"


WEATHER_COLUMNS: tuple[str, ...] = tuple(
    token_column(t, v) for t in range(WEATHER_TOKENS) for v in (*WEATHER_VARIABLES, *TIME_FIELDS)
)
INPUT_COLUMNS: tuple[str, ...] = (*TABULAR_COLUMNS, *WEATHER_COLUMNS)


def weather_token_names() -> tuple[str, ...]:
    """Readable names of the 26 weather tokens: "weather 1d D-3", "weather 3d D-29…D-27"."""
    names = []
    for scale in WINDOW_SCALES:
        width = scale.days_per_token
        for bucket in range(scale.tokens):
            newest = (scale.tokens - 1 - bucket) * width
            oldest = newest + width - 1
            day = "D" if newest == 0 else f"D-{newest}"
            span = day if width == 1 else f"D-{oldest}…{day}"
            names.append(f"weather {width}d {span}")
    return tuple(names)


TOKEN_NAMES: tuple[str, ...] = ("CLS", *TABULAR_COLUMNS, *weather_token_names())


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


def load_artifacts(
    weights: Path, config: Path, preprocessing: Path
) -> tuple[DeepSummitTransformer, Preprocessor]:
    model = DeepSummitTransformer(ModelConfig(**json.loads(config.read_text())))
    model.load_state_dict(load_tensors(weights))
    return model.eval(), Preprocessor.load(preprocessing)


def token_importance(model: DeepSummitTransformer, arrays: FeatureArrays) -> np.ndarray:
    """Attention rollout from CLS (Abnar & Zuidema 2020), averaged over heads: (N, 46), one
    share per non-CLS token, each row summing to 1. The residual path counts as half of each
    layer's mixing, as in the paper."""
    model.eval()
    with torch.inference_mode():
        _, attention = model(**to_tensors(arrays.model_inputs()), return_attention=True)
    size = attention[0].shape[-1]
    rollout = torch.eye(size).expand(len(arrays), size, size)
    for layer in attention:
        mixing = 0.5 * layer.mean(dim=1) + 0.5 * torch.eye(size)
        rollout = (mixing / mixing.sum(dim=-1, keepdim=True)) @ rollout
    from_cls = rollout[:, 0, 1:]
    return (from_cls / from_cls.sum(dim=-1, keepdim=True)).numpy()


class DeepSummitModel(mlflow.pyfunc.PythonModel):
    """P(summit) for raw feature rows (see the module docstring for the input layout)."""

    def load_context(self, context: mlflow.pyfunc.PythonModelContext) -> None:
        artifacts = {name: Path(path) for name, path in context.artifacts.items()}
        self.model, self.preprocessor = load_artifacts(
            artifacts["weights"], artifacts["model_config"], artifacts["preprocessing"]
        )

    def arrays(self, model_input: pd.DataFrame) -> FeatureArrays:
        return self.preprocessor.transform(*split_model_input(model_input))

    def predict(self, context, model_input: pd.DataFrame, params=None) -> np.ndarray:
        return predict_proba(self.model, self.arrays(model_input))


@dataclass(frozen=True)
class ModelFiles:
    """The artifacts of one logged model, written to a folder first."""

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

    def load(self) -> tuple[DeepSummitTransformer, Preprocessor]:
        return load_artifacts(self.weights, self.model_config, self.preprocessing)

    def as_artifacts(self) -> dict[str, str]:
        return {
            "weights": str(self.weights),
            "model_config": str(self.model_config),
            "preprocessing": str(self.preprocessing),
        }


def write_model_files(
    directory: Path, model: DeepSummitTransformer, preprocessor: Preprocessor
) -> ModelFiles:
    directory.mkdir(parents=True, exist_ok=True)
    files = ModelFiles.in_directory(directory)
    save_tensors(files.weights, model.state_dict())
    files.model_config.write_text(json.dumps(asdict(model.config), indent=2))
    preprocessor.save(files.preprocessing)
    return files


# HDB seasons by month (the records' convention: Winter is December to February).
SEASON_BY_MONTH = {
    **dict.fromkeys((3, 4, 5), "Spring"),
    **dict.fromkeys((6, 7, 8), "Summer"),
    **dict.fromkeys((9, 10, 11), "Autumn"),
    **dict.fromkeys((12, 1, 2), "Winter"),
}
AGE_RANGE = (1, 100)  # the ingest's range for member ages
TOP_TOKENS = 5


@dataclass(frozen=True)
class PlannedAttempt:
    """One member's planned summit push, as a person states it (no outcome)."""

    peakid: str
    date: dt.date
    age: int | None = None
    sex: str | None = None  # "M" / "F"
    nationality: str | None = None  # citizenship as the records spell it, e.g. "Nepal"
    role: str | None = "Climber"
    hired: bool = False
    team_size: int | None = None  # members of the expedition
    oxygen: bool | None = None  # planned use of supplemental oxygen
    commercial: bool | None = None
    route: str | None = None  # route1 as the records spell it, e.g. "S Col-SE Ridge"
    style: str | None = None  # expedition style, e.g. "Standard"
    climber_id: str | None = None  # native HDB export only: enables experience features

    @property
    def season(self) -> str:
        return SEASON_BY_MONTH[self.date.month]


@dataclass(frozen=True)
class Prediction:
    probability: float
    top_tokens: tuple[tuple[str, float], ...]  # (token name, share of CLS attention rollout)
    notes: tuple[str, ...]
    model_uri: str
    model_version: str
    weather_source: str
    attempt: PlannedAttempt

    def render(self) -> str:
        a = self.attempt
        lines = [
            f"P(summit) = {self.probability:.3f} for {a.peakid} on {a.date} ({a.season}), "
            f"model {self.model_uri} (v{self.model_version}, weather {self.weather_source})",
            "tokens that weighed most (attention rollout from CLS):",
            *(f"  {name:<32}{share:>7.1%}" for name, share in self.top_tokens),
        ]
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)


def predict_attempt(settings: Settings, planned: PlannedAttempt) -> Prediction:
    """Score a planned attempt with the champion, through the training feature code."""
    with connect(settings.paths.warehouse, read_only=True) as con:
        _check_attempt(con, planned)  # before the model download: bad input fails at once
    name, alias = settings.mlflow.registered_model, settings.mlflow.champion_alias
    client = mlflow.MlflowClient(settings.mlflow.tracking_uri)
    try:
        version = str(client.get_model_version_by_alias(name, alias).version)
    except mlflow.exceptions.MlflowException:
        raise PipelineError(
            f"no model {name}@{alias} at {settings.mlflow.tracking_uri}: run `deepsummit train`"
        ) from None
    uri = f"models:/{name}/{version}"  # pinned: the alias may move while this runs
    mlflow.set_tracking_uri(settings.mlflow.tracking_uri)
    pyfunc = mlflow.pyfunc.load_model(uri)
    champion: DeepSummitModel = pyfunc.unwrap_python_model()
    preprocessor = champion.preprocessor
    source = preprocessor.weather_source
    with connect(settings.paths.warehouse, read_only=True) as con:
        window = window_for(con, planned.peakid, planned.date, source)
        missing = int(window["missing_days"].max()) if window.height else WINDOW_DAYS
        allowed = int(preprocessor.extra.get("max_missing_days", 0))
        if missing > allowed:
            raise PipelineError(
                f"no weather for {planned.peakid} on {planned.date} in source {source!r}: "
                f"{missing} of {WINDOW_DAYS} window days missing (at most {allowed} allowed); "
                "load that period with `deepsummit weather` first"
            )
        features = attempt_features(
            con,
            _attempt_row(planned),
            source,
            float(preprocessor.extra.get("success_rate_prior_strength", 0.0)),
        )
    arrays = preprocessor.transform(features, window)
    probability = float(predict_proba(champion.model, arrays)[0])
    shares = token_importance(champion.model, arrays)[0]
    order = np.argsort(shares)[::-1][:TOP_TOKENS]
    return Prediction(
        probability=probability,
        top_tokens=tuple((TOKEN_NAMES[1 + i], float(shares[i])) for i in order),
        notes=tuple(preprocessor.unknown_notes(features)),
        model_uri=f"models:/{name}@{alias}",
        model_version=version,
        weather_source=source,
        attempt=planned,
    )


def _check_attempt(con: duckdb.DuckDBPyConnection, planned: PlannedAttempt) -> None:
    """Input a model would silently mis-read: one clear line each."""
    low, high = AGE_RANGE
    if planned.age is not None and not low <= planned.age <= high:
        raise PipelineError(f"age {planned.age}: not in {low}..{high}")
    if planned.sex not in (None, "M", "F"):
        raise PipelineError(f"sex {planned.sex!r}: expected M or F")
    if planned.team_size is not None and planned.team_size < 1:
        raise PipelineError(f"team size {planned.team_size}: must be at least 1")
    [known] = query(
        con,
        "serving_known_inputs",
        {"peakid": planned.peakid, "nationality": planned.nationality},
    ).to_dicts()
    if not known["peak_known"]:
        raise PipelineError(f"unknown peak {planned.peakid!r}: not in the warehouse's peaks table")
    if not known["nationality_known"]:
        raise PipelineError(
            f"unknown nationality {planned.nationality!r}: no member of the records has "
            "that citizenship (spell it as the records do, e.g. 'Nepal', 'USA', 'UK')"
        )


def _attempt_row(planned: PlannedAttempt) -> pl.DataFrame:
    """The planned attempt in the features stage's attempt input layout."""
    return pl.DataFrame(
        [
            {
                "expid": "PLANNED",
                "member_id": "PLANNED-01",
                "year": planned.date.year,
                "season": planned.season,
                "peakid": planned.peakid,
                "smtdate": planned.date,
                "route1": planned.route,
                "style": planned.style,
                "totmembers": planned.team_size,
                "commercial": planned.commercial,
                "o2used": planned.oxygen,
                "sex": planned.sex,
                "age": planned.age,
                "citizenship": planned.nationality,
                "expedition_role": planned.role,
                "hired": planned.hired,
                "oxygen_used": planned.oxygen,
                "climber_id": planned.climber_id,
            }
        ],
        schema=ATTEMPT_INPUT_SCHEMA,
    )
