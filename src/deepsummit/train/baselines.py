"""What a practitioner would use instead: logistic regression, LightGBM and CatBoost on the same
inputs.

Each sees exactly what the transformer sees, from the same `FeatureArrays` of the same split:
the numeric features with their missing flags, the categoricals (one-hot for the linear model,
native categorical handling for the trees: LightGBM's categorical splits, CatBoost's ordered
target statistics), the binaries with missing flags, the 26×16 weather window flattened, and
the calendar position of the attempt day. The trees get missing values as NaN (they learn where
they go); the linear model gets the arrays' zeros plus explicit missing indicators.

Each is trained as the transformer's recipe is: on every season before the seasons it answers,
for a fixed budget (the trees' boosting rounds, `train.lightgbm_rounds` and
`train.catboost_rounds`, chosen by the backtest: bench/tree_budgets.py), and it answers with its
own probabilities. Early stopping on a validation split would stop them on the seasons before
the test split, which in the bundle hold expedition records only: a member's own inputs are
missing there, so the trees stopped after a few rounds and barely moved with the member.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import catboost
import lightgbm as lgb
import numpy as np
import pandas as pd
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

from deepsummit.contracts.arrays import FeatureArrays
from deepsummit.core.sections import TrainConfig
from deepsummit.train.trainer import training_slice

ATTEMPT_DAY_TOKEN = 6  # the daily token of day D (tokens 0–6 are D-6 … D)
LOGISTIC, LIGHTGBM, CATBOOST = "logistic regression", "LightGBM", "CatBoost"
DAYS_PER_YEAR = 365.25


Predictor = Callable[[FeatureArrays], np.ndarray]


@dataclass(frozen=True)
class ModelPredictions:
    """A model's probabilities on the rows it is judged on, its cost, and the model itself (to
    score other rows, e.g. a season's candidate push days)."""

    name: str
    test: np.ndarray
    train_seconds: float
    predict_seconds_per_1000: float
    predict: Predictor


def linear_matrix(arrays: FeatureArrays, encoder: OneHotEncoder) -> np.ndarray:
    """Dense design matrix for the logistic regression (zeros + missing indicators)."""
    n = len(arrays)
    angle = 2 * np.pi * arrays.day_of_year[:, ATTEMPT_DAY_TOKEN] / DAYS_PER_YEAR
    return np.hstack(
        [
            arrays.numeric,
            arrays.numeric_missing,
            encoder.transform(arrays.categorical),
            arrays.binary,
            arrays.binary_missing,
            arrays.weather.reshape(n, -1),
            arrays.weather_missing.reshape(n, -1),
            np.column_stack([np.sin(angle), np.cos(angle)]),  # day of year is circular
        ]
    ).astype(np.float32)


def tree_matrix(arrays: FeatureArrays) -> np.ndarray:
    """Matrix for LightGBM: NaN where a value is missing; categoricals as integer codes."""
    n = len(arrays)
    numeric = np.where(arrays.numeric_missing, np.nan, arrays.numeric)
    binary = np.where(arrays.binary_missing, np.nan, arrays.binary.astype(np.float32))
    weather = np.where(arrays.weather_missing, np.nan, arrays.weather).reshape(n, -1)
    day_of_year = arrays.day_of_year[:, ATTEMPT_DAY_TOKEN : ATTEMPT_DAY_TOKEN + 1]
    return np.hstack([numeric, arrays.categorical, binary, weather, day_of_year]).astype(np.float32)


def categorical_columns(arrays: FeatureArrays) -> list[int]:
    first = arrays.numeric.shape[1]
    return list(range(first, first + arrays.categorical.shape[1]))


def _timed(name: str, fit: Callable[[], Predictor], test: FeatureArrays) -> ModelPredictions:
    started = time.perf_counter()
    fitted = fit()
    train_seconds = time.perf_counter() - started

    def predict(arrays: FeatureArrays) -> np.ndarray:
        # No rows to score (a fold whose seasons have no push-day candidates, e.g. 2020's): an
        # empty answer, where sklearn would refuse the empty matrix.
        return fitted(arrays) if len(arrays) else np.empty(0)

    started = time.perf_counter()
    test_probabilities = predict(test)
    per_1000 = (time.perf_counter() - started) / max(1, len(test)) * 1000
    return ModelPredictions(name, test_probabilities, train_seconds, per_1000, predict)


def logistic_regression(
    train: FeatureArrays,
    test: FeatureArrays,
    cardinalities: tuple[int, ...],
    seed: int,
) -> ModelPredictions:
    def fit() -> Predictor:
        encoder = OneHotEncoder(
            categories=[list(range(size)) for size in cardinalities],
            handle_unknown="ignore",
            sparse_output=False,
        ).fit(train.categorical)
        # tol 1e-3 stops lbfgs after ~75 iterations on the bundle's 1,920 columns; solving to
        # sklearn's 1e-4 took ~460 (6× the time) and scored no better on the test split.
        model = make_pipeline(
            StandardScaler(),
            LogisticRegression(C=0.1, tol=1e-3, max_iter=2000, random_state=seed),
        ).fit(
            linear_matrix(train, encoder),
            train.label,
            logisticregression__sample_weight=train.weight,
        )
        return lambda arrays: model.predict_proba(linear_matrix(arrays, encoder))[:, 1]

    return _timed(LOGISTIC, fit, test)


def lightgbm_classifier(seed: int, num_threads: int | None, rounds: int) -> lgb.LGBMClassifier:
    """LightGBM as the baseline runs it: `rounds` trees at learning rate 0.05, with sampling."""
    return lgb.LGBMClassifier(
        n_estimators=rounds,
        learning_rate=0.05,
        num_leaves=31,
        subsample=0.8,
        subsample_freq=1,
        colsample_bytree=0.5,
        random_state=seed,
        n_jobs=num_threads or 0,
        verbose=-1,
    )


def catboost_classifier(
    seed: int, num_threads: int | None, rounds: int
) -> catboost.CatBoostClassifier:
    """CatBoost at its defaults but for the number of trees (its learning rate follows it)."""
    return catboost.CatBoostClassifier(
        iterations=rounds,
        random_seed=seed,
        thread_count=num_threads or -1,
        allow_writing_files=False,
        verbose=False,
    )


def lightgbm(
    train: FeatureArrays, test: FeatureArrays, seed: int, num_threads: int | None, rounds: int
) -> ModelPredictions:
    """Gradient-boosted trees, `rounds` of them."""

    def fit() -> Predictor:
        model = lightgbm_classifier(seed, num_threads, rounds)
        model.fit(
            tree_matrix(train),
            train.label,
            sample_weight=train.weight,
            categorical_feature=categorical_columns(train),
        )
        return lambda arrays: model.predict_proba(tree_matrix(arrays))[:, 1]

    return _timed(LIGHTGBM, fit, test)


def catboost_frame(arrays: FeatureArrays) -> pd.DataFrame:
    """The trees' matrix as CatBoost reads it: the categorical columns as integers."""
    frame = pd.DataFrame(tree_matrix(arrays))
    for position, column in enumerate(categorical_columns(arrays)):
        frame[column] = arrays.categorical[:, position]
    return frame


def catboost_trees(
    train: FeatureArrays, test: FeatureArrays, seed: int, num_threads: int | None, rounds: int
) -> ModelPredictions:
    """CatBoost at its default settings but for the number of trees, `rounds`."""

    def fit() -> Predictor:
        model = catboost_classifier(seed, num_threads, rounds)
        model.fit(
            catboost_frame(train),
            train.label,
            cat_features=categorical_columns(train),
            sample_weight=train.weight,
        )
        return lambda arrays: model.predict_proba(catboost_frame(arrays))[:, 1]

    return _timed(CATBOOST, fit, test)


def run_baselines(
    train: FeatureArrays,
    test: FeatureArrays,
    cardinalities: tuple[int, ...],
    config: TrainConfig,
) -> list[ModelPredictions]:
    """The baselines as the training settings ask (its slice of `train`, `max_train_rows`; its
    seed, threads and boosting rounds), trained on `train` with its rows' weights and judged on
    `test`."""
    train = training_slice(train, config.max_train_rows, config.seed)
    seed, threads = config.seed, config.num_threads
    return [
        logistic_regression(train, test, cardinalities, seed),
        lightgbm(train, test, seed, threads, config.lightgbm_rounds),
        catboost_trees(train, test, seed, threads, config.catboost_rounds),
    ]
