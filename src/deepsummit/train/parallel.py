"""How the train stage shares the machine's cores: the evaluation's transformer, the baselines
beside it in a thread, and a refit beside both in a process of its own.

A second torch thread speeds a `cpu` training step up by a tenth only (0.084 s on one, 0.078 s
on two), so on two cores each training takes one thread and the baselines' half minute all but
vanishes behind the transformer's.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.pool import AsyncResult
from pathlib import Path

import torch
from threadpoolctl import threadpool_limits

from deepsummit.contracts.preprocessing import Preprocessor
from deepsummit.contracts.snapshot import PREPROCESSING_FILE, read_features, read_windows
from deepsummit.core.config import TrainConfig
from deepsummit.train.recipe import Recipe, Refit, refit


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
    """The refit of the snapshot at `directory` for the epochs a recipe that keeps its last
    epoch runs (every seed trains `max_epochs`), reporting nothing: it runs in a process of its
    own (`refit_beside`)."""
    config = recipe.training
    epochs = {config.seed + offset: config.max_epochs for offset in range(config.seeds)}
    return refit(
        recipe,
        read_features(directory),
        read_windows(directory),
        Preprocessor.load(directory / PREPROCESSING_FILE),
        epochs,
        checkpoints,
    )


@contextmanager
def refit_beside(
    recipe: Recipe, directory: Path, checkpoints: Path, threads: int | None = None
) -> Iterator[AsyncResult | None]:
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
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        yield pool.apply_async(refit_snapshot, (beside, directory, checkpoints))


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
