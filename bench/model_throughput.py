"""Training steps per second of DeepSummitTransformer, before and after the model's speed-ups,
side by side in one run.

"before" is the model package as a past commit wrote it (default 65663a7: per-feature Python
loops in the tokenizer, every position through the last block, the RMSNorm by hand), read from
git into a temporary package and fed batches as its trainer drew them (rows with and without
weather mixed). "after" is the model of this checkout with its trainer's batches (rows without
any weather in batches of their own, encoded without the weather positions). Both train on the
same rows of a features snapshot (the cpu profile's batch size, AdamW, BCE, gradient clipping),
with the same torch threads; the spec's base configuration is timed the same way.

    .venv/bin/python bench/model_throughput.py --bundle /tmp/deepsummit-bundle [--threads 2]
"""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import torch
from _steps import Batch, grouped_batches, seconds_per_step
from _training import add_snapshot_options, bench_settings, snapshot_location
from torch import nn

from deepsummit.contracts.arrays import FeatureArrays
from deepsummit.contracts.snapshot import load_features
from deepsummit.core.config import load_settings
from deepsummit.core.sections import PROJECT_ROOT
from deepsummit.model.summary import count_parameters
from deepsummit.model.transformer import DeepSummitTransformer
from deepsummit.serve.inference import to_tensors

BEFORE = "65663a7"  # the last commit before the batched tokenizer and the CLS-only last block
MODEL_PACKAGE = "src/deepsummit/model"


def model_at(commit: str) -> tuple[type, type]:
    """(DeepSummitTransformer, ModelConfig) as `commit` wrote them: its model package, read from
    git into a temporary package of its own."""
    names = subprocess.run(
        ["git", "ls-tree", "--name-only", f"{commit}:{MODEL_PACKAGE}"],
        cwd=PROJECT_ROOT, check=True, capture_output=True, text=True,
    ).stdout.split()  # fmt: skip
    package = f"model_{commit}"
    root = Path(tempfile.mkdtemp()) / package
    root.mkdir()
    for name in names:
        source = subprocess.run(
            ["git", "show", f"{commit}:{MODEL_PACKAGE}/{name}"],
            cwd=PROJECT_ROOT, check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        (root / name).write_text(source.replace("deepsummit.model.", f"{package}."))
    sys.path.insert(0, str(root.parent))
    transformer = importlib.import_module(f"{package}.transformer")
    config = importlib.import_module(f"{package}.config")
    return transformer.DeepSummitTransformer, config.ModelConfig


def mixed_batches(arrays: FeatureArrays, batch_size: int, seed: int) -> Iterator[Batch]:
    """Batches as the trainer drew them before: one shuffle of every row."""
    inputs = to_tensors(arrays.model_inputs())
    labels = torch.from_numpy(arrays.label)
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    for rows in order.split(batch_size):
        yield {name: tensor[rows] for name, tensor in inputs.items()}, labels[rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_snapshot_options(parser)
    parser.add_argument("--before", default=BEFORE, help="the commit to compare with")
    parser.add_argument("--steps", type=int, default=30, help="timed steps per row")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per row")
    args = parser.parse_args()
    settings = bench_settings(args)
    arrays, preprocessor = load_features(snapshot_location(args, settings))
    train = arrays["train"]
    dimensions = preprocessor.model_dimensions()
    batch_size = settings.train.batch_size
    steps_per_epoch = -(-len(train) // batch_size)
    old_transformer, old_config = model_at(args.before)
    cpu = settings.model.with_inputs(dimensions)
    knobs = {
        name: getattr(cpu, name)
        for name in ("hidden_size", "num_layers", "num_heads", "dropout", "attention_dropout")
    } | {"drop_path_rate": cpu.drop_path_rate}
    old_dimensions = {k: v for k, v in dimensions.items() if k != "numeric_bin_edges"}
    base = load_settings("base").model.with_inputs(dimensions)
    rows: list[tuple[str, Callable[[], nn.Module], Callable[[], Iterator[Batch]]]] = [
        (
            f"before ({args.before}): the cpu model",
            lambda: old_transformer(old_config(**knobs, **old_dimensions)),
            lambda: mixed_batches(train, batch_size, 0),
        ),
        (
            "after: the same model, one member",
            lambda: DeepSummitTransformer(replace(cpu, ensemble_size=1)),
            lambda: grouped_batches(train, batch_size, 0),
        ),
        (
            f"after: the cpu profile ({cpu.ensemble_size} members)",
            lambda: DeepSummitTransformer(cpu),
            lambda: grouped_batches(train, batch_size, 0),
        ),
        (
            f"before ({args.before}): the spec's base model",
            lambda: old_transformer(old_config(**old_dimensions)),
            lambda: mixed_batches(train, batch_size, 0),
        ),
        (
            "after: the spec's base model",
            lambda: DeepSummitTransformer(base),
            lambda: grouped_batches(train, batch_size, 0),
        ),
    ]
    print(
        f"{len(train):,} training rows in batches of {batch_size} ({steps_per_epoch} steps an "
        f"epoch); torch {torch.__version__}, {torch.get_num_threads()} CPU threads; median of "
        f"{args.steps} timed steps after {args.warmup}"
    )
    print()
    print("| model | parameters | steps/s | s/step | s/epoch (estimate) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, build, draw in rows:
        torch.manual_seed(0)
        model = build()
        seconds = seconds_per_step(model, draw(), args.steps, args.warmup)
        print(
            f"| {name} | {count_parameters(model):,} | {1 / seconds:.2f} | {seconds:.3f} "
            f"| {seconds * steps_per_epoch:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
