"""Vocabularies and normalisation, fitted on the training split only, saved beside the features.

`Preprocessor.fit` learns from train rows; `transform` turns any rows (a split, or one planned
attempt) and their weather windows into `FeatureArrays`. Missing values stay visible: a masked
0.0 for numbers and weather, index 0 for categories, a masked 0 for binaries.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from deepsummit.contracts.arrays import FeatureArrays
from deepsummit.core.inputs import (
    CALENDAR_INPUTS,
    RARE_FOLDS,
    WEATHER_CHANNELS,
    WEATHER_TOKENS,
    InputSet,
)

# A weather window is named by (peakid, date) in the windows frame (deepsummit/features/windows.py
# builds it), and by (peakid, smtdate) in the features frame.
WINDOW_KEY: tuple[str, str] = ("peakid", "date")
FEATURE_WINDOW_KEY: tuple[str, str] = ("peakid", "smtdate")


def window_tensors(
    windows: pl.DataFrame,
) -> tuple[pl.DataFrame, np.ndarray, np.ndarray, np.ndarray]:
    """Windows frame → (keys (W rows: peakid, date), values (W, 26, 16) float64 with NaN for
    NULL, days_before (W, 26), day_of_year (W, 26)), in key order."""
    ordered = windows.sort([*WINDOW_KEY, "token"])
    if ordered.height % WEATHER_TOKENS:
        raise ValueError(
            f"windows frame has {ordered.height} rows, not a multiple of {WEATHER_TOKENS}"
        )
    count = ordered.height // WEATHER_TOKENS
    keys = ordered.select(WINDOW_KEY).gather_every(WEATHER_TOKENS)
    values = (
        ordered.select(WEATHER_CHANNELS)
        .cast(pl.Float64)
        .fill_null(float("nan"))
        .to_numpy()
        .reshape(count, WEATHER_TOKENS, len(WEATHER_CHANNELS))
    )
    days_before = ordered["days_before"].to_numpy().reshape(count, WEATHER_TOKENS)
    day_of_year = ordered["day_of_year"].to_numpy().reshape(count, WEATHER_TOKENS)
    return keys, values, days_before, day_of_year


@dataclass(frozen=True)
class Standardiser:
    """z = (x - mean) / std per column; a column without train values has mean None."""

    mean: dict[str, float | None]
    std: dict[str, float]

    def arrays(self, names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
        mean = np.array([np.nan if self.mean[n] is None else self.mean[n] for n in names])
        return mean, np.array([self.std[n] for n in names])


def _standardiser(names: tuple[str, ...], values: np.ndarray, weights: np.ndarray) -> Standardiser:
    """Weighted mean and population std per column of `values` (rows × names), NaN ignored; a
    std of 0 (or no values) becomes 1 so that z-scoring never divides by zero."""
    means: dict[str, float | None] = {}
    stds: dict[str, float] = {}
    for column, name in enumerate(names):
        present = ~np.isnan(values[:, column])
        total = weights[present].sum()
        if total == 0:
            means[name], stds[name] = None, 1.0
            continue
        x = values[present, column]
        mean = float(np.average(x, weights=weights[present]))
        std = float(np.sqrt(np.average((x - mean) ** 2, weights=weights[present])))
        means[name], stds[name] = mean, std if std > 0 else 1.0
    return Standardiser(means, stds)


def _window_index(
    features: pl.DataFrame, keys: pl.DataFrame, window_key: tuple[str, str] = FEATURE_WINDOW_KEY
) -> np.ndarray:
    """Row i of `features` → the index of its window in `keys` (every row must have one)."""
    indexed = keys.with_row_index("window").rename(dict(zip(WINDOW_KEY, window_key, strict=True)))
    joined = features.select(window_key).join(
        indexed, on=list(window_key), how="left", maintain_order="left"
    )
    if joined["window"].null_count():
        first = joined.filter(pl.col("window").is_null()).row(0)
        raise ValueError(f"no weather window for (peakid, smtdate) = {first[:2]}")
    return joined["window"].to_numpy().astype(np.int64)


def _frequent(values: pl.Series, min_count: int) -> list[str]:
    """The values seen at least `min_count` times, most frequent first (ties by value)."""
    counts = values.drop_nulls().value_counts().filter(pl.col("count") >= min_count)
    return counts.sort(["count", values.name], descending=[True, False])[values.name].to_list()


def _fold_tokens(name: str, frame: pl.DataFrame) -> pl.Series:
    """Each row's shared token of the folding input `name`: "rare <name>: <fold value>" (null
    where the fold column is)."""
    fold = RARE_FOLDS[name]
    return frame.select(pl.format("rare {}: {}", pl.lit(name), pl.col(fold)).alias(name))[name]


@dataclass(frozen=True)
class Preprocessor:
    """Everything a model needs to turn feature rows into its inputs, learnt from train rows."""

    inputs: InputSet  # the tabular inputs this model reads, in token order
    vocabularies: dict[str, list[str]]  # value at position i has index i + 1; 0 = unknown
    numeric: Standardiser
    weather: Standardiser
    weather_source: str
    min_category_count: int
    # A value of a folding input (RARE_FOLDS) seen in fewer train rows reads as its fold's token.
    rare_fold_count: int = 0
    extra: dict[str, Any] = field(default_factory=dict)  # provenance: split, digest, …
    # The lowest and highest value the train rows hold of each calendar input the model reads.
    calendar_ranges: dict[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def categorical_cardinalities(self) -> tuple[int, ...]:
        """Embedding sizes per categorical feature: the vocabulary plus index 0 (unknown)."""
        return tuple(len(self.vocabularies[name]) + 1 for name in self.inputs.categorical)

    def model_dimensions(self) -> dict[str, Any]:
        """The `ModelConfig` fields the inputs fix (token counts, vocabulary sizes)."""
        return {
            "n_numeric": len(self.inputs.numeric),
            "n_binary": len(self.inputs.binary),
            "categorical_cardinalities": self.categorical_cardinalities,
            "n_weather_vars": len(WEATHER_CHANNELS),
        }

    @classmethod
    def fit(
        cls,
        train: pl.DataFrame,
        windows: pl.DataFrame,
        inputs: InputSet,
        weather_source: str,
        min_category_count: int,
        extra: dict[str, Any] | None = None,
        rare_fold_count: int = 0,
    ) -> Preprocessor:
        """Learn from the train rows only: categories seen at least `min_category_count`
        times (most frequent first), numeric and per-variable weather statistics. Weather
        statistics weigh each window by the number of train attempts that use it.

        A folding input (RARE_FOLDS) keeps its values seen at least `rare_fold_count` times;
        the others count towards their fold's shared token ("rare peakid: 6500–6999 m"), which
        joins the vocabulary after them when it reaches `min_category_count`."""
        vocabularies = {}
        for name in inputs.categorical:
            folds = name in RARE_FOLDS
            own = _frequent(
                train[name],
                max(min_category_count, rare_fold_count) if folds else min_category_count,
            )
            vocabularies[name] = own
            if folds:
                folded = _fold_tokens(name, train.filter(~pl.col(name).is_in(own)))
                vocabularies[name] = own + _frequent(folded, min_category_count)
        numeric = _standardiser(
            inputs.numeric,
            train.select(inputs.numeric).cast(pl.Float64).fill_null(float("nan")).to_numpy(),
            np.ones(train.height),
        )
        keys, values, _, _ = window_tensors(windows)
        uses = np.bincount(_window_index(train, keys), minlength=keys.height)
        tokens = values.shape[1]
        weather = _standardiser(
            WEATHER_CHANNELS,
            values.reshape(-1, len(WEATHER_CHANNELS)),
            np.repeat(uses, tokens).astype(np.float64),
        )
        calendar = [
            name
            for name in inputs.numeric
            if name in CALENDAR_INPUTS and train[name].drop_nulls().len()
        ]
        return cls(
            inputs,
            vocabularies,
            numeric,
            weather,
            weather_source,
            min_category_count,
            rare_fold_count,
            extra or {},
            {name: (float(train[name].min()), float(train[name].max())) for name in calendar},
        )

    def refit(
        self,
        train: pl.DataFrame,
        windows: pl.DataFrame,
        inputs: InputSet | None = None,
        **extra: Any,
    ) -> Preprocessor:
        """The same settings (weather source, thresholds; the input set unless given), learnt
        anew from other train rows; `extra` adds to the provenance."""
        return Preprocessor.fit(
            train,
            windows,
            inputs or self.inputs,
            self.weather_source,
            self.min_category_count,
            {**self.extra, **extra},
            self.rare_fold_count,
        )

    def transform(
        self,
        features: pl.DataFrame,
        windows: pl.DataFrame,
        window_key: tuple[str, str] = FEATURE_WINDOW_KEY,
    ) -> FeatureArrays:
        """Feature rows (+ their windows) → model arrays; a row without `label` gets NaN.
        Row i's window is the one whose (peakid, date) equals the row's `window_key` columns
        (serving names each request row's own window)."""
        inputs = self.inputs
        numeric_raw = (
            features.select(inputs.numeric).cast(pl.Float64).fill_null(float("nan")).to_numpy()
        )
        numeric_mean, numeric_std = self.numeric.arrays(inputs.numeric)
        numeric = (numeric_raw - numeric_mean) / numeric_std
        numeric_missing = np.isnan(numeric)

        categorical = (
            np.stack([self._encode(name, features) for name in inputs.categorical], axis=1)
            if features.height and inputs.categorical
            else np.zeros((features.height, len(inputs.categorical)), np.int64)
        )

        binary_raw = (
            features.select(inputs.binary).cast(pl.Float64).fill_null(float("nan")).to_numpy()
        )
        binary_missing = np.isnan(binary_raw)

        keys, values, days_before, day_of_year = window_tensors(windows)
        index = _window_index(features, keys, window_key)
        weather_mean, weather_std = self.weather.arrays(WEATHER_CHANNELS)
        # (rows, 26, channels): the rows' copy of their windows, standardised and zero-filled
        # in place (the weather is most of the arrays: no temporary copies of it)
        weather = values[index]
        weather -= weather_mean
        weather /= weather_std
        weather_missing = np.isnan(weather)
        weather[weather_missing] = 0.0

        label = (
            features["label"].cast(pl.Float32).to_numpy()
            if "label" in features.columns
            else np.full(features.height, np.nan, np.float32)
        )
        return FeatureArrays(
            numeric=np.where(numeric_missing, 0.0, numeric).astype(np.float32),
            numeric_missing=numeric_missing,
            categorical=categorical.astype(np.int64),
            binary=np.where(binary_missing, 0, binary_raw).astype(np.int64),
            binary_missing=binary_missing,
            weather=weather.astype(np.float32),
            weather_missing=weather_missing,
            days_before=days_before[index].astype(np.float32),
            day_of_year=day_of_year[index].astype(np.float32),
            label=label.astype(np.float32),
        )

    def _tokens(self, name: str, features: pl.DataFrame) -> list[str | None]:
        """Each row's value of `name` as the vocabulary names it: the value itself, or for a
        folding input a value outside the vocabulary as its fold's token."""
        values = features[name].to_list()
        if name not in RARE_FOLDS:
            return values
        known = set(self.vocabularies[name])
        folds = _fold_tokens(name, features).to_list()
        return [v if v in known or v is None else f for v, f in zip(values, folds, strict=True)]

    def _encode(self, name: str, features: pl.DataFrame) -> np.ndarray:
        lookup = {value: position + 1 for position, value in enumerate(self.vocabularies[name])}
        tokens = self._tokens(name, features)
        return np.array([lookup.get(token, 0) for token in tokens], dtype=np.int64)

    def unknown_notes_by_row(self, features: pl.DataFrame) -> list[list[str]]:
        """Per row, one note per category value the model does not know by itself: a rare
        value read as its fold's shared token, or one it sees as unknown (to show the user)."""
        notes: list[list[str]] = [[] for _ in range(features.height)]
        for name in self.inputs.categorical:
            known = set(self.vocabularies[name])
            tokens = self._tokens(name, features)
            for row, value in enumerate(features[name].to_list()):
                if value is None or value in known:
                    continue
                if tokens[row] in known:
                    notes[row].append(
                        f"{name} {value!r} is seen too rarely in the training records (fewer "
                        f"than {self.rare_fold_count} attempts): it is read as the shared token "
                        f"{tokens[row]!r}, leaning on its himal, height and the wider success "
                        "rates rather than on its own few attempts"
                    )
                else:
                    notes[row].append(
                        f"{name} {value!r} is not in the training vocabulary: unknown"
                    )
        return notes

    def calendar_notes_by_row(self, features: pl.DataFrame) -> list[list[str]]:
        """Per row, a note for each calendar input outside the range of the training rows: the
        push day lies outside the seasons the model learnt (it is answered all the same)."""
        notes: list[list[str]] = [[] for _ in range(features.height)]
        for name, (low, high) in self.calendar_ranges.items():
            for row, value in enumerate(features[name].to_list()):
                if value is not None and not low <= value <= high:
                    notes[row].append(
                        f"{name} {value:g} lies outside the {low:g}–{high:g} of the training "
                        "attempts: the push day is outside the seasons the model learnt"
                    )
        return notes

    def to_json(self) -> str:
        document = {"weather_channels": list(WEATHER_CHANNELS), **asdict(self)}
        return json.dumps(document, indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Preprocessor:
        document = json.loads(text)
        if tuple(document.pop("weather_channels")) != WEATHER_CHANNELS:
            raise ValueError("preprocessing weather channels differ from deepsummit.core.inputs")
        return cls(
            inputs=InputSet(**{kind: tuple(names) for kind, names in document["inputs"].items()}),
            vocabularies=document["vocabularies"],
            numeric=Standardiser(**document["numeric"]),
            weather=Standardiser(**document["weather"]),
            weather_source=document["weather_source"],
            min_category_count=document["min_category_count"],
            rare_fold_count=document["rare_fold_count"],
            extra=document["extra"],
            calendar_ranges={k: tuple(v) for k, v in document["calendar_ranges"].items()},
        )

    def save(self, path: Path) -> None:
        path.write_text(self.to_json())

    @classmethod
    def load(cls, path: Path) -> Preprocessor:
        return cls.from_json(path.read_text())
