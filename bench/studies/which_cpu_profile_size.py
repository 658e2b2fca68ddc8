"""Which size of network can `make train` afford on a 2-core CPU?

Candidate sizes trained on one split.

Answer: the `cpu` profile's (hidden size 32, 2 layers) held against hidden size 64, 4 layers and
10 epochs; the figures of that one-split run were not kept. One split decides little: the
question is now answered on the backtest's folds by bench/studies/which_training_profile.py
(hidden size 64 and 3 layers are among its candidates), written down in docs/evaluation.md,
"How the `cpu` profile was chosen".

Candidate `cpu` profiles side by side on the bundle's features: what each costs to train on
this machine and what it scores, to choose the profile the main job trains with.

Each candidate is the `cpu` profile plus dotted overrides; all train on the same features folder
with the same seed, one after the other in this process. Prints a markdown table: parameters,
epochs run (early stopping included), seconds per epoch, training seconds, best validation AUC,
test AUC and Brier of the best epoch.

    .venv/bin/python bench/studies/which_cpu_profile_size.py [--features var/features/<digest12>]
"""

from __future__ import annotations

import argparse
import platform
import tempfile
from pathlib import Path
from typing import Any

import torch

from deepsummit.contracts.snapshot import load_features, newest_features_dir
from deepsummit.core.config import load_settings, nested_overrides
from deepsummit.model.summary import count_parameters
from deepsummit.serve.inference import predict_proba
from deepsummit.train.metrics import compute_metrics
from deepsummit.train.trainer import train_model

CANDIDATES: dict[str, dict[str, Any]] = {
    "cpu (H=32, 2 layers)": {},
    "H=64, 2 layers": {"model.hidden_size": 64},
    "H=32, 4 layers": {"model.num_layers": 4},
    "H=32, 2 layers, 10 epochs": {"train.max_epochs": 10, "train.patience": 4},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--features", type=Path, help="a features folder (default: the newest)")
    args = parser.parse_args()

    features_dir = args.features or newest_features_dir(load_settings("cpu").features.features_dir)
    arrays, preprocessor = load_features(features_dir)
    print(
        f"features {features_dir.name}: train {len(arrays['train']):,}, validation "
        f"{len(arrays['validation']):,}, test {len(arrays['test']):,} attempts; "
        f"{platform.processor() or platform.machine()}, torch threads {torch.get_num_threads()}\n"
    )
    print(
        "| candidate | parameters | epochs (best) | s / epoch | train s | val AUC | test AUC "
        "| test Brier |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, dotted in CANDIDATES.items():
        settings = load_settings("cpu", nested_overrides(dotted))
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
        metrics = compute_metrics(
            test.label, predict_proba(result.model, test, settings.train.batch_size)
        )
        epochs = len(result.history)
        print(
            f"| {name} | {count_parameters(result.model):,} | {epochs} ({result.best_epoch}) "
            f"| {result.seconds / epochs:.1f} | {result.seconds:.0f} | {result.best_val_auc:.4f} "
            f"| {metrics.auc:.4f} | {metrics.brier:.4f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
