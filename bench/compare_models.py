"""The transformer against logistic regression and LightGBM on the same time split of the
bundle's features: test AUC, accuracy, Brier, ECE, train time and inference time per 1,000
attempts, as a markdown table. Trains with the given profile (default: cpu), no MLflow.

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

from pipeline.config import load_settings
from pipeline.features.build import load_features, newest_features_dir
from pipeline.train.stage import ModelScore, score_models
from pipeline.train.trainer import train_model


def markdown(scores: list[ModelScore]) -> str:
    lines = [
        "| model | AUC | accuracy | Brier | ECE | train s | inference s / 1,000 |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for s in scores:
        m = s.metrics
        lines.append(
            f"| {s.name} | {m.auc:.4f} | {m.accuracy:.4f} | {m.brier:.4f} | {m.ece:.4f} "
            f"| {s.train_seconds:.1f} | {s.predict_seconds_per_1000:.4f} |"
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
    cardinalities = preprocessor.categorical_cardinalities
    with tempfile.TemporaryDirectory() as checkpoints:
        result = train_model(
            settings.train,
            settings.model,
            arrays["train"],
            arrays["validation"],
            cardinalities,
            Path(checkpoints),
        )
    scores, _ = score_models(settings.train, result, arrays)

    test = arrays["test"]
    print(
        f"features {features_dir.name}: train {result.train_rows:,}, validation "
        f"{len(arrays['validation']):,}, test {len(test):,} attempts "
        f"(test positive rate {test.label.mean():.3f}); profile {settings.profile} "
        f"(H={settings.model.hidden_size}, L={settings.model.num_layers}, "
        f"best epoch {result.best_epoch} of {len(result.history)}); "
        f"{platform.processor() or platform.machine()}, torch threads {torch.get_num_threads()}\n"
    )
    print(markdown(scores))


if __name__ == "__main__":
    main()
