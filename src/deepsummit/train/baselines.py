"""What a practitioner would use instead: logistic regression, LightGBM and CatBoost, each fitted
as its library fits it best, at the settings its own search chose (`baselines` settings).

Each reads the transformer's `FeatureArrays` of the same rows:
- the logistic regression: the numeric features (zeros where missing) with missing flags, the
  categoricals one-hot, the binaries with missing flags, the weather window flattened with its
  flags, and the attempt day's position on the circle of the year;
- the trees: missing values as missing (NaN: each split learns where they go, so an expedition
  record's absent member columns are told apart from any member's), the categoricals as the
  library's own categorical splits (LightGBM's) or ordered target statistics (CatBoost's), and
  the weather window flattened where their settings keep it.

A tree's rounds are no setting: `fit` counts them on validation rows by early stopping, or
trains the count it is given. How each held-out check chooses and refits is
deepsummit/train/baseline_protocol.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import catboost
import lightgbm as lgb
import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

from deepsummit.contracts.arrays import FeatureArrays
from deepsummit.contracts.calibration import Calibrator
from deepsummit.contracts.trees import (
    ATTEMPT_DAY_TOKEN,
    CATBOOST,
    LIGHTGBM,
    SavedTrees,
    catboost_frame,
    categorical_columns,
    tree_matrix,
)
from deepsummit.core.baseline_sections import BaselinesConfig, CatBoostConfig, LightGBMConfig

LOGISTIC = "logistic regression"
DAYS_PER_YEAR = 365.25

Predictor = Callable[[FeatureArrays], np.ndarray]


@dataclass(frozen=True)
class Fitted:
    """A fitted baseline: its probability on any rows, and the rounds it answers with (the best
    on its validation rows where it had some; 0 for the logistic regression); a tree's model as
    a served blend saves it (None for the logistic regression)."""

    probability: Predictor
    rounds: int = 0
    trees: SavedTrees | None = None


# (training rows, seed, rounds or None to count them on the validation rows, validation rows)
Fit = Callable[[FeatureArrays, int, int | None, FeatureArrays | None], Fitted]


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


def logistic_fit(c: float, cardinalities: tuple[int, ...]) -> Fit:
    """The logistic regression with inverse regularisation `c`: the seed and the rounds do
    not apply (lbfgs is deterministic), nor do validation rows."""

    def fit(
        train: FeatureArrays, seed: int, rounds: int | None, validation: FeatureArrays | None
    ) -> Fitted:
        encoder = OneHotEncoder(
            categories=[list(range(size)) for size in cardinalities],
            handle_unknown="ignore",
            sparse_output=False,
        ).fit(train.categorical)
        # tol 1e-3 stops lbfgs after ~75 iterations on the bundle's 1,920 columns; solving to
        # sklearn's 1e-4 took ~460 (6× the time) and scored no better on the test split.
        model = make_pipeline(
            StandardScaler(), LogisticRegression(C=c, tol=1e-3, max_iter=2000, random_state=seed)
        ).fit(
            linear_matrix(train, encoder),
            train.label,
            logisticregression__sample_weight=train.weight,
        )
        return Fitted(lambda arrays: model.predict_proba(linear_matrix(arrays, encoder))[:, 1])

    return fit


def lightgbm_fit(config: LightGBMConfig, limits: BaselinesConfig, threads: int | None) -> Fit:
    """LightGBM at `config`, its rounds counted on validation rows by their AUC (at most
    `limits.max_rounds`, stopping after `limits.patience` without a better one) or given."""

    def fit(
        train: FeatureArrays, seed: int, rounds: int | None, validation: FeatureArrays | None
    ) -> Fitted:
        model = lgb.LGBMClassifier(
            n_estimators=rounds or limits.max_rounds,
            learning_rate=config.learning_rate,
            num_leaves=config.num_leaves,
            min_child_samples=config.min_child_samples,
            colsample_bytree=config.feature_fraction,
            reg_lambda=config.lambda_l2,
            subsample=0.8,
            subsample_freq=1,
            random_state=seed,
            n_jobs=threads or 0,
            verbose=-1,
        )
        counting = rounds is None
        model.fit(
            tree_matrix(train, config.weather),
            train.label,
            sample_weight=train.weight,
            categorical_feature=categorical_columns(train),
            **(_lightgbm_stopping(validation, config.weather, limits.patience) if counting else {}),
        )
        best = model.best_iteration_ if counting else rounds
        return Fitted(
            lambda arrays: model.predict_proba(
                tree_matrix(arrays, config.weather), num_iteration=best
            )[:, 1],
            best,
            # Refit at a given count, every round is kept: the booster alone answers the same.
            None if counting else SavedTrees(LIGHTGBM, config.weather, (model.booster_,)),
        )

    return fit


def _lightgbm_stopping(validation: FeatureArrays, weather: bool, patience: int) -> dict:
    return {
        "eval_X": (tree_matrix(validation, weather),),
        "eval_y": (validation.label,),
        "eval_sample_weight": [validation.weight],
        "eval_metric": "auc",
        "callbacks": [lgb.early_stopping(patience, first_metric_only=True, verbose=False)],
    }


def catboost_fit(config: CatBoostConfig, limits: BaselinesConfig, threads: int | None) -> Fit:
    """CatBoost at `config` (an explicit learning rate: CatBoost's own follows the number of
    iterations), its rounds counted on validation rows by their AUC or given."""

    def fit(
        train: FeatureArrays, seed: int, rounds: int | None, validation: FeatureArrays | None
    ) -> Fitted:
        counting = rounds is None
        model = catboost.CatBoostClassifier(
            iterations=rounds or limits.max_rounds,
            learning_rate=config.learning_rate,
            depth=config.depth,
            l2_leaf_reg=config.l2_leaf_reg,
            rsm=config.rsm,
            random_seed=seed,
            thread_count=threads or -1,
            allow_writing_files=False,
            verbose=False,
            **({"eval_metric": "AUC", "od_type": "Iter", "od_wait": limits.patience}
               if counting else {}),
        )  # fmt: skip
        cats = categorical_columns(train)
        model.fit(
            catboost_frame(train, config.weather),
            train.label,
            cat_features=cats,
            sample_weight=train.weight,
            eval_set=catboost.Pool(
                catboost_frame(validation, config.weather),
                validation.label,
                cat_features=cats,
                weight=validation.weight,
            )
            if counting
            else None,
            use_best_model=counting,
        )
        best = model.get_best_iteration() + 1 if counting else rounds
        return Fitted(
            lambda arrays: model.predict_proba(catboost_frame(arrays, config.weather))[:, 1],
            best,
            SavedTrees(CATBOOST, config.weather, (model,)),
        )

    return fit


def baseline_fits(
    config: BaselinesConfig, cardinalities: tuple[int, ...], threads: int | None
) -> dict[str, Fit]:
    """Each baseline's fit at its settings, by name."""
    return {
        LOGISTIC: logistic_fit(config.logistic_c, cardinalities),
        LIGHTGBM: lightgbm_fit(config.lightgbm, config, threads),
        CATBOOST: catboost_fit(config.catboost, config, threads),
    }


@dataclass(frozen=True)
class ModelPredictions:
    """A model's probabilities on the rows it is judged on, its cost, the model itself (to
    score other rows, e.g. a season's candidate push days), and the map its answer goes
    through (None: the caller's, or none)."""

    name: str
    test: np.ndarray
    train_seconds: float
    predict_seconds_per_1000: float
    predict: Predictor
    calibrator: Calibrator | None = None
    rounds: int = 0  # a tree's boosting rounds, as its held-out check counted them
    # Its own probabilities on the member check's rows, trained on the seasons before them
    # (what its map is fitted on); None for a model that has none here.
    check: np.ndarray | None = None
