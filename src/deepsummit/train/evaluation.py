"""The train stage's evaluation: the transformer and the baselines, trained on identical rows,
calibrated the same way on the validation split and judged on the test split (the newest
seasons), with intervals, by expedition where the test split holds expedition records, and in
plots; all of it logged to the active MLflow run.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import mlflow
import numpy as np
import polars as pl
from sklearn.metrics import roc_auc_score

from deepsummit.contracts.arrays import FeatureArrays, ensemble_probability, member_logits
from deepsummit.contracts.calibration import Calibrator, Method
from deepsummit.core.config import BacktestConfig
from deepsummit.train.baselines import ModelPredictions
from deepsummit.train.bootstrap import weighted_auc
from deepsummit.train.comparison import TRANSFORMER, Comparison, SeedSpread, compare, logit
from deepsummit.train.expeditions import ExpeditionTable, expedition_table
from deepsummit.train.metrics import auc_by_group
from deepsummit.train.plots import plot_calibration, plot_roc
from deepsummit.train.recipe import transformer_predictions
from deepsummit.train.tracking import log_plots
from deepsummit.train.trainer import TrainResult


def evaluate(
    arrays: dict[str, FeatureArrays],
    test_rows: pl.DataFrame,
    test_groups: np.ndarray,
    results: list[TrainResult],
    baselines: list[ModelPredictions],
    calibration: Method,
    backtest: BacktestConfig,
    run_dir: Path,
) -> tuple[Comparison, dict[str, np.ndarray], ExpeditionTable | None]:
    """The transformer and the baselines (trained on identical rows) calibrated the same way,
    compared with intervals; metrics, the comparison, AUC by group and plots logged. Returns
    the comparison, each model's calibrated test probabilities and, where the test split holds
    expedition records, their table by expedition."""
    models = [transformer_predictions(results, arrays), *baselines]
    comparison = compare_with_seeds(models, results, arrays, test_groups, calibration)
    mlflow.log_metrics(
        {
            **comparison.metrics(),
            **{f"seed_{r.seed}_best_epoch": r.best_epoch for r in results},
            **{f"seed_{r.seed}_best_val_auc": r.best_val_auc for r in results},
            # The answer's own validation AUC (with one seed, that seed's best_val_auc).
            "ensemble_val_auc": float(
                roc_auc_score(arrays["validation"].label, models[0].validation)
            ),
            **{f"seed_{r.seed}_epochs_run": len(r.history) for r in results},
            "train_rows": results[0].train_rows,
        }
    )
    mlflow.log_text(comparison.markdown(), "evaluation/comparison.md")
    calibrated = {
        m.name: comparison.calibrators[m.name].probabilities(logit(m.test)) for m in models
    }
    expeditions = held_out_expeditions(backtest, test_rows, calibrated)
    if expeditions is not None:
        mlflow.log_metrics(expeditions.metrics("test_expeditions_"))
        mlflow.log_text(expeditions.markdown(), "evaluation/expeditions.md")
    mlflow.log_dict(
        _group_aucs(test_rows, arrays["test"].label, calibrated[TRANSFORMER]),
        "evaluation/auc_by_group.json",
    )
    _log_plots(run_dir / "plots", arrays, models, calibrated, results[0])
    return comparison, calibrated, expeditions


def held_out_expeditions(
    backtest: BacktestConfig, test_rows: pl.DataFrame, calibrated: dict[str, np.ndarray]
) -> ExpeditionTable | None:
    """The test split's expedition records judged by expedition (deepsummit/train/
    expeditions.py): their members share one P, so ranking members within them says nothing.
    None when the test split has none."""
    is_record = (test_rows["record"] == "expedition").to_numpy()
    if not is_record.any():
        return None
    rows = test_rows.filter(pl.Series(is_record)).select("expid", "year", "season", "label")
    return expedition_table(
        rows.with_columns(
            **{name: pl.Series(values[is_record]) for name, values in calibrated.items()}
        ),
        tuple(calibrated),
        backtest.min_season_expeditions,
        backtest.unscored_seasons,
    )


def compare_with_seeds(
    models: list[ModelPredictions],
    results: list[TrainResult],
    arrays: dict[str, FeatureArrays],
    test_groups: np.ndarray,
    calibration: Method,
) -> Comparison:
    """The models compared on the test rows (deepsummit/train/comparison.py), the transformer's
    seeds' spread beside them."""
    comparison = compare(
        models, arrays["validation"].label, arrays["test"].label, test_groups, calibration
    )
    calibrator = comparison.calibrators[TRANSFORMER]
    return dataclasses.replace(comparison, seeds=seed_spread(results, arrays, calibrator))


def seed_spread(
    results: list[TrainResult], arrays: dict[str, FeatureArrays], calibrator: Calibrator
) -> SeedSpread:
    """Each seed's validation and test AUC, and the mean width of the band of every member's
    calibrated probability on the test rows (what `predict` shows as the band)."""
    ones = np.ones((1, len(arrays["test"])))
    inputs = arrays["test"].model_inputs()
    per_seed = [ensemble_probability(member_logits([r.model], inputs)) for r in results]
    members = calibrator.probabilities(member_logits([r.model for r in results], inputs))
    return SeedSpread(
        tuple(r.seed for r in results),
        tuple(r.best_val_auc for r in results),
        tuple(float(weighted_auc(arrays["test"].label, p, ones)[0]) for p in per_seed),
        float((members.max(0) - members.min(0)).mean()),
    )


def _group_aucs(
    test_rows: pl.DataFrame, labels: np.ndarray, probabilities: np.ndarray
) -> dict[str, dict[str, float | None]]:
    groups = {}
    for column in ("peakid", "season"):
        aucs = auc_by_group(labels, probabilities, test_rows[column].fill_null("unknown"))
        groups[column] = {k: (None if np.isnan(v) else v) for k, v in aucs.items()}
        mlflow.log_metrics(
            {f"test_auc_{column}_{k}": v for k, v in aucs.items() if not np.isnan(v)}
        )
    return groups


def _log_plots(
    directory: Path,
    arrays: dict[str, FeatureArrays],
    models: list[ModelPredictions],
    calibrated: dict[str, np.ndarray],
    first: TrainResult,
) -> None:
    """ROC, reliability before and after calibration, and the first seed's learning
    curve."""
    labels = arrays["test"].label
    log_plots(
        directory,
        [
            plot_roc(labels, calibrated, directory / "roc.png"),
            plot_calibration(
                labels,
                {m.name: m.test for m in models},
                directory / "calibration_before.png",
                "before calibration",
            ),
            plot_calibration(
                labels, calibrated, directory / "calibration.png", "after calibration"
            ),
        ],
        first.history,
    )
