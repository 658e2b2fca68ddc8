"""The CUDA path for real: throughput of the `cpu` and spec `base` models on a GPU, and the base
profile trained there by the project's own trainer (checkpoint, crash, resume), its weights and
test answers brought back for the CPU side to load and judge.

Two halves, because the GPU machine has no Prefect, MLflow or Polars, only PyTorch, NumPy and
scikit-learn (its pydantic comes as wheels carried beside this script):

1. Here, `--prepare DIR`: the newest features snapshot's arrays (train/validation/test.npz) and
   the model's input dimensions (dimensions.json) into DIR, to carry.
2. There, `--features DIR --out OUT`: prints and writes OUT/throughput.json (median seconds of a
   training step and steps per second for each profile, fp32 against bf16 autocast, eager
   against `torch.compile`), then trains the base profile (seed 42) on CUDA through
   `deepsummit.train.trainer.train_model`, stopping it after its first epoch as a crash would
   and resuming from the checkpoint, for as many of the spec's 100 epochs as `--minutes` allows
   (early stopping at the spec's patience of 10 may end it sooner). It writes
   OUT/base_weights_*.pt and OUT/base_config.json (the weights in parts, the architecture) and
   OUT/base_test.npy (its test probabilities on the GPU).
3. Here again, `--judge OUT`: loads the weights on the CPU, checks that it answers the test rows
   as it did on the GPU, and scores it beside the `cpu` profile (`--cpu-predictions`: the test
   predictions a `make train` run logged) per expedition on the snapshot's test seasons.

    .venv/bin/python bench/gpu.py --bundle /tmp/deepsummit-bundle --prepare gpu_carry/features
    python3 bench/gpu.py --features gpu_carry/features --out $OUT --minutes 6      # on the GPU
    .venv/bin/python bench/gpu.py --judge OUT [--cpu-predictions FILE]

The backtest's folds of the base profile (bench/studies/which_training_profile.py's BASE_ON_GPU
candidate) go the same way: each fold's arrays and push-day candidates prepared here (its member
check's and those of every season before its test year), the fold trained on the GPU as the backtest
trains it (`--epochs`: at most that many of the spec's 100-epoch schedule; early stopping at
patience 10 usually ends the check sooner, and the recipe then trains the epochs it kept), its
answers (deepsummit/backtest/answers.py) scored here into the candidate's fold cache and paired
with the cpu profile on identical held-out rows:

    .venv/bin/python bench/gpu.py --prepare-folds gpu_carry/folds --years 2018 2019
    python3 bench/gpu.py --train-folds gpu_carry/folds --out $OUT --epochs 30      # on the GPU
    .venv/bin/python bench/gpu.py --judge-folds OUT --years 2018 2019
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from _steps import grouped_batches, seconds_per_step  # noqa: E402  (imports deepsummit: after src)

from deepsummit.contracts.arrays import FeatureArrays  # noqa: E402
from deepsummit.contracts.tensors import load_tensors, save_tensors  # noqa: E402
from deepsummit.core.config import load_settings  # noqa: E402
from deepsummit.model.config import ModelConfig  # noqa: E402
from deepsummit.model.transformer import DeepSummitTransformer  # noqa: E402
from deepsummit.serve.inference import predict_proba  # noqa: E402
from deepsummit.train.trainer import train_model  # noqa: E402

SPLITS = ("train", "validation", "test")
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class Crash(RuntimeError):
    """Raised after the first epoch, once its checkpoint is on disk: a run killed there."""


def prepare(bundle: Path, directory: Path) -> None:
    from _bundle import bundle_features  # the services-free features build (polars, DuckDB)

    from deepsummit.contracts.snapshot import load_features

    _, report = bundle_features(bundle)
    _, preprocessor = load_features(report.directory)
    directory.mkdir(parents=True, exist_ok=True)
    for split in SPLITS:
        shutil.copy(report.directory / f"{split}.npz", directory / f"{split}.npz")
    (directory / "dimensions.json").write_text(json.dumps(preprocessor.model_dimensions()))
    (directory / "snapshot.txt").write_text(str(report.directory))
    print(f"{directory}: the arrays and dimensions of {report.directory}")


def load_arrays(directory: Path) -> tuple[dict[str, FeatureArrays], dict]:
    arrays = {split: FeatureArrays.load(directory / f"{split}.npz") for split in SPLITS}
    return arrays, json.loads((directory / "dimensions.json").read_text())


def throughput(
    arrays: dict[str, FeatureArrays], dimensions: dict, steps: int, compile_too: bool
) -> list[dict]:
    rows = []
    for profile in ("cpu", "base"):
        settings = load_settings(profile)
        config = settings.model.with_inputs(dimensions)
        for compiled in (False, True) if compile_too else (False,):
            for precision in ("fp32", "bf16"):
                torch.manual_seed(0)
                model = DeepSummitTransformer(config).to(DEVICE)
                row = {"profile": profile, "batch": settings.train.batch_size}
                row |= {"compile": compiled, "precision": precision}
                started = time.perf_counter()
                try:
                    runnable = torch.compile(model) if compiled else model
                    draw = grouped_batches(arrays["train"], settings.train.batch_size, seed=0)
                    step = seconds_per_step(runnable, draw, steps, 5, DEVICE, precision)
                    row |= {"s_per_step": step, "steps_per_s": 1 / step}
                except Exception as error:  # a variant that fails is a finding, not the end
                    row["error"] = f"{type(error).__name__}: {error}"[:300]
                row["wall_s"] = time.perf_counter() - started
                print(json.dumps(row), flush=True)
                rows.append(row)
    return rows


def train_base(arrays: dict[str, FeatureArrays], dimensions: dict, epochs: int, out: Path) -> dict:
    """The base profile (seed 42) through the project's trainer on CUDA: crashed after its
    first epoch, resumed from the checkpoint, trained to `epochs` (or early stopping)."""
    settings = load_settings("base")
    train_config = settings.train.model_copy(update={"device": DEVICE.type, "max_epochs": epochs})
    checkpoints = Path(tempfile.mkdtemp())

    def crash_after_first(record) -> None:
        if record.epoch == 1:
            raise Crash

    try:
        train_model(
            train_config, settings.model, arrays["train"], arrays["validation"], dimensions,
            checkpoints, crash_after_first,
        )  # fmt: skip
    except Crash:
        print("crashed after epoch 1, as planned; resuming", flush=True)
    result = train_model(
        train_config, settings.model, arrays["train"], arrays["validation"], dimensions,
        checkpoints,
    )  # fmt: skip
    model = result.model.to(DEVICE)
    probabilities = predict_proba(model, arrays["test"], 1024, DEVICE.type)
    np.save(out / "base_test.npy", probabilities)
    # In parts of at most 12 MB: the device tool brings back files of up to 16 MiB.
    state, parts, size = result.model.cpu().state_dict(), [{}], 0
    for name, tensor in state.items():
        if size + tensor.nbytes > 12e6 and parts[-1]:
            parts.append({})
            size = 0
        parts[-1][name], size = tensor, size + tensor.nbytes
    for index, part in enumerate(parts):
        save_tensors(out / f"base_weights_{index}.pt", part)
    (out / "base_config.json").write_text(json.dumps(dataclasses.asdict(result.config)))
    return {
        "device": torch.cuda.get_device_name(0) if DEVICE.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "resumed_from_epoch": result.resumed_from_epoch,
        "best_epoch": result.best_epoch,
        "best_val_auc": result.best_val_auc,
        "stopped_early": result.stopped_early,
        "epochs_run": len(result.history),
        "max_epochs": epochs,
        "seconds": result.seconds,
        "history": [dataclasses.asdict(record) for record in result.history],
    }


def run_on_gpu(
    features: Path, out: Path, minutes: float, steps: int, rows_cap: int | None, compile_too: bool
) -> None:
    """`rows_cap` and no compile: a quick dry run of this half on the CPU."""
    out.mkdir(parents=True, exist_ok=True)
    arrays, dimensions = load_arrays(features)
    if rows_cap:
        arrays = {split: a.subset(slice(0, rows_cap)) for split, a in arrays.items()}
    started = time.perf_counter()
    rows = throughput(arrays, dimensions, steps, compile_too)
    (out / "throughput.json").write_text(json.dumps(rows, indent=1))
    base_fp32 = next(
        r for r in rows if r["profile"] == "base" and not r["compile"] and r["precision"] == "fp32"
    )
    batch = load_settings("base").train.batch_size
    epoch_s = 1.15 * base_fp32["s_per_step"] * len(arrays["train"]) / batch
    left_s = minutes * 60 - (time.perf_counter() - started)
    epochs = int(max(2, min(100, left_s / epoch_s)))
    print(f"base: about {epoch_s:.1f} s an epoch, {left_s:.0f} s left: {epochs} epochs", flush=True)
    report = train_base(arrays, dimensions, epochs, out)
    (out / "base_training.json").write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items() if k != "history"}), flush=True)


def judge(bundle: Path, out: Path, cpu_predictions: Path | None) -> None:
    import polars as pl
    from _bundle import bundle_features

    from deepsummit.contracts.snapshot import load_features, read_features
    from deepsummit.core.planned import KEY_COLUMNS
    from deepsummit.train.expeditions import expedition_table

    _, report = bundle_features(bundle)
    arrays, _ = load_features(report.directory)
    config = json.loads((out / "base_config.json").read_text())
    model = DeepSummitTransformer(ModelConfig(**config))
    state: dict[str, torch.Tensor] = {}
    for part in sorted(out.glob("base_weights_*.pt")):
        state |= load_tensors(part)
    model.load_state_dict(state)
    on_cpu = predict_proba(model.eval(), arrays["test"])
    on_gpu = np.load(out / "base_test.npy")
    print(
        f"the GPU-trained base model on the CPU: {len(on_cpu):,} test rows, max |P(CPU) − "
        f"P(GPU)| {np.abs(on_cpu - on_gpu).max():.1e} (the GPU scored under bf16 autocast)"
    )
    rows = read_features(report.directory).filter(pl.col("split") == "test")
    rows = rows.with_columns(pl.Series("base", on_cpu))
    models: tuple[str, ...] = ("base",)
    if cpu_predictions is not None:  # the cpu profile's evaluation, as make train logged it
        cpu = pl.read_parquet(cpu_predictions).select(
            *KEY_COLUMNS, pl.col("probability").alias("cpu")
        )
        rows = rows.join(cpu, on=KEY_COLUMNS, how="inner", maintain_order="left")
        models = ("base", "cpu")
    table = expedition_table(rows, models, 30, {})
    print(f"\n{rows.height:,} test members of expedition records, seasons 2023–2025\n")
    print(table.markdown())


def prepare_folds(bundle: Path, directory: Path, years: list[int]) -> None:
    sys.path.insert(0, str(ROOT / "bench" / "studies"))  # the candidates' study
    from which_training_profile import BASE_ON_GPU, candidate_settings

    from deepsummit.backtest.run import fold_jobs
    from deepsummit.contracts.snapshot import newest_features_dir

    settings = candidate_settings(bundle, "cpu", BASE_ON_GPU, min(years), max(years))
    snapshot = newest_features_dir(settings.features.features_dir)
    directory.mkdir(parents=True, exist_ok=True)
    recipe = {
        "model": dataclasses.asdict(settings.model),
        "train": settings.train.model_dump(mode="json"),
    }
    (directory / "recipe.json").write_text(json.dumps(recipe, indent=1))
    for job in fold_jobs(settings, snapshot, years):
        folder = directory / f"fold-{job.fold.name}"
        folder.mkdir(exist_ok=True)
        parts = {
            "check_train": job.check.arrays["train"],
            "check_validation": job.check.arrays["validation"],
            "check_members": job.check.member_arrays,
            "train": job.arrays["train"],
            "test": job.arrays["test"],
            "push_days": job.day_arrays,
        }
        for part, arrays in parts.items():
            arrays.save(folder / f"{part}.npz")
        dimensions = {
            "check": job.check.preprocessor.model_dimensions(),
            "served": job.preprocessor.model_dimensions(),
        }
        (folder / "dimensions.json").write_text(json.dumps(dimensions))
        sizes = {part: len(a) for part, a in parts.items()}
        print(f"{folder}: {job.fold.describe()}, rows {sizes}", flush=True)


def train_folds(directory: Path, out: Path, epochs: int) -> None:
    """The GPU half: each prepared fold trained by the project's trainer as the backtest trains
    it (the member check, validated on its years, then the recipe on every season before the
    test year for the epochs the check kept), its answers written to OUT/fold-<year>.npz with
    OUT/fold-<year>.json (device, seconds, each check training's epochs) as soon as the fold is
    done."""
    from deepsummit.backtest.answers import FoldAnswers
    from deepsummit.core.sections import TrainConfig
    from deepsummit.serve.inference import member_logits
    from deepsummit.train.trainer import TrainingSummary

    recipe = json.loads((directory / "recipe.json").read_text())
    architecture = ModelConfig(**recipe["model"])
    train_config = TrainConfig(**recipe["train"]).model_copy(update={"device": DEVICE.type})
    seeds = [train_config.seed + offset for offset in range(train_config.seeds)]
    out.mkdir(parents=True, exist_ok=True)
    for folder in sorted(directory.glob("fold-*"), reverse=True):  # the newest first
        parts = ("check_train", "check_validation", "check_members", "train", "test", "push_days")
        arrays = {part: FeatureArrays.load(folder / f"{part}.npz") for part in parts}
        dimensions = json.loads((folder / "dimensions.json").read_text())
        started = time.perf_counter()
        check = [
            train_model(
                train_config.model_copy(update={"seed": seed}), architecture,
                arrays["check_train"], arrays["check_validation"], dimensions["check"],
                Path(tempfile.mkdtemp()), epochs=epochs,
            )
            for seed in seeds
        ]  # fmt: skip
        kept = {r.seed: r.best_epoch if train_config.keep == "best" else epochs for r in check}
        served = [
            train_model(
                train_config.model_copy(update={"seed": seed}), architecture, arrays["train"],
                None, dimensions["served"], Path(tempfile.mkdtemp()), epochs=kept[seed],
            )
            for seed in seeds
        ]  # fmt: skip
        for result in (*check, *served):
            result.model.to(DEVICE)
        check_logits = member_logits(
            [r.model for r in check], arrays["check_members"].model_inputs(), device=DEVICE
        )
        answers = FoldAnswers.of(
            check_logits,
            [TrainingSummary.of(r) for r in check],
            served,
            arrays["test"],
            arrays["push_days"],
            DEVICE,
        )
        answers.save(out / f"{folder.name}.npz")
        report = {
            "device": torch.cuda.get_device_name(0) if DEVICE.type == "cuda" else "cpu",
            "torch": torch.__version__,
            "seconds": time.perf_counter() - started,
            "epoch_cap": epochs,
            "trainings": [
                {
                    "seed": r.seed,
                    "best_epoch": r.best_epoch,
                    "epochs_run": len(r.history),
                    "stopped_early": r.stopped_early,
                    "best_val_auc": r.best_val_auc,
                    "seconds": r.seconds,
                    "val_auc": [round(e.val_auc, 4) for e in r.history],
                }
                for r in check
            ],
        }
        (out / f"{folder.name}.json").write_text(json.dumps(report, indent=1))
        print(json.dumps({"fold": folder.name} | report), flush=True)


def judge_folds(bundle: Path, out: Path, years: list[int]) -> None:
    """The GPU's answers scored into the candidate's fold cache as the backtest scores a fold
    it trained (deepsummit/backtest/run.py: fold_outcome), then paired with the cpu profile."""
    sys.path.insert(0, str(ROOT / "bench" / "studies"))  # the candidates' study
    from which_training_profile import BASE_ON_GPU, CANDIDATES, candidate_settings, compare

    from deepsummit.backtest.answers import FoldAnswers
    from deepsummit.backtest.cache import fold_directories, write_fold
    from deepsummit.backtest.outcome import fold_outcome
    from deepsummit.backtest.run import fold_jobs
    from deepsummit.contracts.snapshot import newest_features_dir

    settings = candidate_settings(bundle, "cpu", BASE_ON_GPU, min(years), max(years))
    snapshot = newest_features_dir(settings.features.features_dir)
    directory, baselines = fold_directories(settings, snapshot)
    directory.mkdir(parents=True, exist_ok=True)
    for job in fold_jobs(settings, snapshot, years):
        name = f"fold-{job.fold.name}"
        if not (out / f"{name}.npz").exists():
            print(f"{name}: no answers from the GPU", flush=True)
            continue
        trained = json.loads((out / f"{name}.json").read_text())
        answers = FoldAnswers.load(out / f"{name}.npz")
        outcome = fold_outcome(settings, job, answers, baselines, trained["seconds"])
        outcome.summary["trained_on"] = trained["device"]
        write_fold(directory, outcome)
    compare(bundle, "cpu", [next(iter(CANDIDATES)), BASE_ON_GPU], min(years), max(years))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, default=Path("/tmp/deepsummit-bundle"))
    parser.add_argument("--prepare", type=Path, help="write the arrays to carry here")
    parser.add_argument("--features", type=Path, help="the carried arrays (on the GPU)")
    parser.add_argument("--out", type=Path, help="where the GPU half writes")
    parser.add_argument("--minutes", type=float, default=6.0, help="the GPU half's budget")
    parser.add_argument("--steps", type=int, default=30, help="timed steps per throughput row")
    parser.add_argument("--rows", type=int, help="a slice of every split (a dry run)")
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--judge", type=Path, help="the GPU half's output, judged on the CPU")
    parser.add_argument(
        "--cpu-predictions",
        type=Path,
        help="evaluation/test_predictions.parquet of a make train run (the cpu profile)",
    )
    parser.add_argument("--prepare-folds", type=Path, help="write the folds' arrays here")
    parser.add_argument("--train-folds", type=Path, help="the carried folds (on the GPU)")
    parser.add_argument("--judge-folds", type=Path, help="the GPU's fold answers, scored here")
    parser.add_argument("--years", type=int, nargs="+", default=[2018, 2019])
    parser.add_argument("--epochs", type=int, default=30, help="cap per fold training")
    args = parser.parse_args()
    if args.prepare_folds:
        prepare_folds(args.bundle, args.prepare_folds, args.years)
    elif args.train_folds:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")  # epochs
        train_folds(args.train_folds, args.out, args.epochs)
    elif args.judge_folds:
        judge_folds(args.bundle, args.judge_folds, args.years)
    elif args.prepare:
        prepare(args.bundle, args.prepare)
    elif args.judge:
        judge(args.bundle, args.judge, args.cpu_predictions)
    else:
        run_on_gpu(
            args.features, args.out, args.minutes, args.steps, args.rows, not args.no_compile
        )


if __name__ == "__main__":
    main()
