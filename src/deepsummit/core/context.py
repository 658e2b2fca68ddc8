"""What a stage function is told about the run it is part of (plain data, no Prefect)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

# progress(done, total, message): how far a long stage has come, in its own units (epochs,
# weighted API calls). The flows turn it into a Prefect progress artifact; by default nothing.
Progress = Callable[[float, float, str], None]
# exclusive(name): held by one run at a time, across processes and machines. The flows give
# Prefect's global concurrency slot of that name; by default nothing is held.
Exclusive = Callable[[str], AbstractContextManager[None]]

# What runs may not do at the same time.
WAREHOUSE = "deepsummit-warehouse"  # write the DuckDB warehouse
REGISTRY = "deepsummit-registry"  # decide and move the champion alias


def no_progress(done: float, total: float, message: str) -> None:
    """The default: a stage run from a test or a script reports its progress to nobody."""


def partial_progress(progress: Progress, before: float, total: float) -> Progress:
    """One part of a longer piece of work: its (done, _, message) reported to `progress` as
    (before + done, total, message)."""

    def report(done: float, _part_total: float, message: str) -> None:
        progress(before + done, total, message)

    return report


@contextmanager
def not_exclusive(name: str) -> Iterator[None]:
    """The default: a stage run from a test or a script is the only one."""
    yield


@dataclass(frozen=True)
class RunContext:
    run_dir: Path  # this run's folder (reports, Data Docs, plots), under paths.runs_dir
    tags: Mapping[str, str] = field(default_factory=dict)  # provenance for MLflow: flow run id…
    progress: Progress = no_progress
    exclusive: Exclusive = not_exclusive
