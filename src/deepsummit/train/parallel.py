"""How the train stage's trainings share the machine's cores: the held-out checks' transformer
trainings one after the other, the baselines beside them in a thread, and the refit on every
season beside both in a process of its own.

A second torch thread speeds a `cpu` training step up by a tenth only (0.084 s on one, 0.078 s
on two), so on two cores each training takes one thread and the baselines' half minute all but
vanishes behind the transformer's.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
from collections.abc import Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import torch
from threadpoolctl import threadpool_limits

from deepsummit.contracts.arrays import FeatureArrays
from deepsummit.contracts.preprocessing import Preprocessor
from deepsummit.contracts.snapshot import PREPROCESSING_FILE, read_features, read_windows
from deepsummit.core.baseline_sections import BaselinesConfig
from deepsummit.core.context import Progress, partial_progress
from deepsummit.core.sections import TrainConfig
from deepsummit.train.baseline_protocol import baseline_seeds, run_baselines, stopping_rows
from deepsummit.train.baselines import ModelPredictions
from deepsummit.train.recipe import (
    CheckInputs,
    EpochLog,
    MemberCheck,
    Recipe,
    Refit,
    check_inputs,
    member_check,
    prefixed,
    preprocessing_for,
    refit,
    report_epochs,
    training_arrays,
)


@dataclass(frozen=True)
class Cores:
    """Torch threads for the evaluation's transformer and for a refit beside it (0: none); the
    baselines take one core."""

    transformer: int
    refit: int


def core_split(config: TrainConfig, refit_beside: bool) -> Cores:
    """The cores (`train.num_threads`, default torch's) shared out: one to the baselines, the
    rest to the evaluation's transformer, halved with a refit beside it."""
    rest = max(1, (config.num_threads or torch.get_num_threads()) - 1)
    if not refit_beside:
        return Cores(transformer=rest, refit=0)
    return Cores(transformer=max(1, rest - rest // 2), refit=max(1, rest // 2))


def refit_snapshot(recipe: Recipe, directory: Path, checkpoints: Path) -> Refit:
    """The refit on every season of the snapshot at `directory` for the epochs a recipe that
    keeps its last epoch runs (every seed trains `max_epochs`), reporting nothing: it runs in a
    process of its own (`refit_beside`)."""
    config = recipe.training
    epochs = {config.seed + offset: config.max_epochs for offset in range(config.seeds)}
    rows, windows = read_features(directory), read_windows(directory)
    template = Preprocessor.load(directory / PREPROCESSING_FILE)
    return refit(
        recipe, rows, windows, preprocessing_for(template, rows, windows), epochs, checkpoints
    )


@contextmanager
def refit_beside(
    recipe: Recipe, directory: Path, checkpoints: Path, threads: int | None = None
) -> Iterator[Future[Refit] | None]:
    """The refit started at once, in a process of its own, beside the evaluation, when it needs
    nothing from it: a recipe that keeps its last epoch (`train.keep = "last"`, the cpu profile)
    trains every seed `max_epochs` epochs, whatever the validation says. Its own process, because
    torch's random generator is one per process: two trainings in threads would draw each
    other's dropout masks. Yields the pending `Refit` (None where the refit must wait for the
    epochs the evaluation keeps); the process is stopped on the way out. `threads`: torch's in
    the refit (default: `core_split`'s)."""
    if recipe.training.keep != "last":
        yield None
        return
    beside = recipe.with_training(
        num_threads=threads or core_split(recipe.training, refit_beside=True).refit
    )
    # An executor, not a multiprocessing.Pool: a child that dies (at import, say) breaks its
    # future with BrokenProcessPool, where a Pool would start it again and again while the stage
    # waits.
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    try:
        yield pool.submit(refit_snapshot, beside, directory, checkpoints)
    finally:
        # Python 3.11 has no public way to stop a running task (terminate_workers is 3.14's).
        workers = list(pool._processes.values())
        pool.shutdown(wait=False, cancel_futures=True)
        for worker in workers:
            worker.terminate()
            worker.join()


@dataclass(frozen=True)
class SideBySide:
    transformer: TrainConfig  # the evaluation's training settings
    baselines: TrainConfig
    pool: Executor  # a thread for the baselines


@contextmanager
def side_by_side(config: TrainConfig, refit_beside: bool = False) -> Iterator[SideBySide]:
    """The evaluation's transformer and the baselines trained at once: the baselines on one
    core in a thread of the returned pool, the transformer on its share of the others
    (`core_split`). Torch's and BLAS's thread counts are back as they were after."""
    threads = torch.get_num_threads()
    cores = core_split(config, refit_beside)
    with (
        threadpool_limits(limits=1, user_api="blas"),  # numpy's BLAS under the baselines
        ThreadPoolExecutor(max_workers=1, thread_name_prefix="baselines") as pool,
    ):
        try:
            yield SideBySide(
                config.model_copy(update={"num_threads": cores.transformer}),
                config.model_copy(update={"num_threads": 1}),
                pool,
            )
        finally:
            torch.set_num_threads(threads)


@dataclass(frozen=True)
class Trained:
    """The recipe's three trainings, and the baselines: what the stage judges and registers."""

    check: MemberCheck  # the newest member seasons before the test split
    newest: Refit  # every season before the test split: it answers the test split
    served: Refit  # every season: the model registered
    baselines: list[ModelPredictions]  # trained as `newest` is, answering the test split
    test: FeatureArrays  # the test split as `newest` and the baselines read it


def train_recipe(
    recipe: Recipe,
    baselines_config: BaselinesConfig,
    directory: Path,
    rows: pl.DataFrame,
    windows: pl.DataFrame,
    template: Preprocessor,
    checkpoints: Path,
    progress: Progress,
    epoch_log: EpochLog | None,
) -> Trained:
    """The member check and the model that answers the test split, one after the other; the
    baselines beside them on one core; the refit on every season beside both (a recipe that
    keeps its last epoch) or after them (one that keeps its best needs the check's epochs).
    `rows`: every attempt of the snapshot at `directory`, with its split; `baselines_config`:
    the baselines' settings (deepsummit/train/baseline_protocol.py)."""
    config = recipe.training
    per_training = config.seeds * config.max_epochs
    part = _parts(progress, per_training, epoch_log)
    before = rows.filter(pl.col("split") != "test")
    test_rows = rows.filter(pl.col("split") == "test")
    newest_preprocessor = preprocessing_for(template, before, windows)
    test = newest_preprocessor.transform(test_rows, windows)
    check_rows = check_inputs(recipe, rows, windows, template, int(before["year"].max()))
    with refit_beside(recipe, directory, checkpoints / "refit") as early_refit:
        with side_by_side(config, early_refit is not None) as cores:
            baselines = cores.pool.submit(
                _baselines, recipe, baselines_config, cores.baselines, before, test_rows, test,
                windows, template, newest_preprocessor, check_rows,
            )  # fmt: skip
            own = dataclasses.replace(recipe, training=cores.transformer)
            check = member_check(
                own, check_rows, checkpoints / "member-check",
                *part(0, "member check", "member_check_"),
            )  # fmt: skip
            epochs = check.epochs(config)
            newest = refit(
                own, before, windows, newest_preprocessor, epochs, checkpoints / "newest",
                *part(1, "before the test split", ""),
            )  # fmt: skip
            trained_baselines = baselines.result()
        served_progress, served_log = part(2, "refit on every season", "refit_")
        if early_refit is None:
            served = refit(
                recipe, rows, windows, preprocessing_for(template, rows, windows), epochs,
                checkpoints / "refit", served_progress, served_log,
            )  # fmt: skip
        else:
            served = early_refit.result()
            report_epochs(served.results, config, served_progress, served_log)
    # The refits train the epochs the check kept, which can be fewer than planned: the stage's
    # progress would end short of 100% on a finished training.
    served_progress(per_training, per_training, "done")
    return Trained(check, newest, served, trained_baselines, test)


def _baselines(
    recipe: Recipe,
    config: BaselinesConfig,
    training: TrainConfig,
    before: pl.DataFrame,
    test_rows: pl.DataFrame,
    test: FeatureArrays,
    windows: pl.DataFrame,
    template: Preprocessor,
    preprocessor: Preprocessor,
    check: CheckInputs,
) -> list[ModelPredictions]:
    """The baselines answering the test split (`test`: its rows as `preprocessor`, learnt from
    the rows `before` it, reads them), through the protocol (deepsummit/train/
    baseline_protocol.py), with the `training` settings of their thread."""
    return run_baselines(
        training_arrays(preprocessor, before, windows, training),
        test,
        preprocessor.categorical_cardinalities,
        stopping_rows(before, windows, template, test_rows, check, training),
        check,
        config,
        training,
        baseline_seeds(config, recipe.architecture, recipe.training),
    )


def _parts(progress: Progress, per_training: int, epoch_log: EpochLog | None):
    """(progress, epoch log) of the stage's i-th training of three: its epochs counted after
    the trainings before it, its progress and its metrics named."""

    def part(index: int, label: str, prefix: str) -> tuple[Progress, EpochLog | None]:
        share = partial_progress(progress, index * per_training, 3 * per_training)
        return (
            lambda done, total, message: share(
                done, total, f"training {index + 1} of 3 ({label}), {message}"
            ),
            prefixed(epoch_log, prefix),
        )

    return part
