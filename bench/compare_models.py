"""The transformer against logistic regression and LightGBM on the same time split of the
bundle's features: test AUC, accuracy, Brier, ECE (each model calibrated on validation as the
train stage does, 95% intervals from its expedition bootstrap), train time and inference time per
1,000 attempts, as a markdown table. Trains one seed with the given profile (default: cpu), no
MLflow.

    .venv/bin/python bench/compare_models.py [--features var/features/<digest12>] [--profile cpu]

Without --features it uses the newest folder under settings.features.features_dir (run
`deepsummit features` first).
"""

from __future__ import annotations

import argparse
import logging
import platform
import tempfile
from pathlib import Path

import torch
from _training import split_groups

from deepsummit.contracts.snapshot import load_features, newest_features_dir
from deepsummit.core.config import load_settings
from deepsummit.train.baselines import configured_baselines
from deepsummit.train.comparison import ModelRow
from deepsummit.train.evaluation import compare_with_seeds
from deepsummit.train.recipe import transformer_predictions
from deepsummit.train.trainer import train_model


def markdown(rows: tuple[ModelRow, ...]) -> str:
    lines = [
        "| model | AUC [95% CI] | accuracy | Brier [95% CI] | ECE [95% CI] | train s "
        "| inference s / 1,000 |",
        "| --- | --- | ---: | --- | --- | ---: | ---: |",
    ]
    for row in rows:
        m = row.calibrated
        lines.append(
            f"| {row.name} | {m.auc.render(4)} | {row.accuracy:.4f} | {m.brier.render(4)} "
            f"| {m.ece.render(4)} | {row.train_seconds:.1f} | {row.predict_seconds_per_1000:.4f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--features", type=Path, help="a features folder (default: the newest)")
    parser.add_argument("--profile", default="cpu", help="settings profile to train with")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")

    settings = load_settings(args.profile)
    features_dir = args.features or newest_features_dir(settings.features.features_dir)
    arrays, preprocessor = load_features(features_dir)
    with tempfile.TemporaryDirectory() as checkpoints:
        result = train_model(
            settings.train,
            settings.model,
            arrays["train"],
            arrays["validation"],
            preprocessor.model_dimensions(),
            Path(checkpoints),
        )
    test = arrays["test"]
    models = [
        transformer_predictions([result], arrays),
        *configured_baselines(arrays, preprocessor.categorical_cardinalities, settings.train),
    ]
    comparison = compare_with_seeds(
        models, [result], arrays, split_groups(features_dir, "test"), settings.train.calibration
    )

    print(
        f"features {features_dir.name}: train {result.train_rows:,}, validation "
        f"{len(arrays['validation']):,}, test {len(test):,} attempts "
        f"(test positive rate {test.label.mean():.3f}); profile {settings.profile} "
        f"(calibration {settings.train.calibration}, "
        f"H={settings.model.hidden_size}, L={settings.model.num_layers}, "
        f"best epoch {result.best_epoch} of {len(result.history)}); "
        f"{platform.processor() or platform.machine()}, torch threads {torch.get_num_threads()}\n"
    )
    print(markdown(comparison.rows))


if __name__ == "__main__":
    main()
