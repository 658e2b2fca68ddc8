"""The scorer under load: throughput and latency of well-formed `predict` requests at 1, 4 and 16
parallel askers, and at 32 with and without two hostile clients beside them (one that sends a
byte a second, one that announces a 100 MB body: tests/scorer_clients.py).

The champion is a tiny-profile training on the data bundle, built and registered once under
--workdir (the bundle's warehouse and features snapshot, `bench/_bundle.py`, then the train
stage, about two minutes) and reused by later runs. The scorer runs as `deepsummit up` starts
it, with the configured `services.scorer_*` settings, on a free port; each asker asks for an
attempt of its own, --requests requests in all at each level, one after the other per asker;
the 32 askers alone and beside the hostile clients take turns, --pairs times. Prints one table:
requests a second, p50, p99 and the longest wait, every status not 200, and the scorer's
resident memory (its processes' PSS summed) after each level; then the issue's target for the
32 askers beside the hostile clients (every well-formed request answered, throughput at least
90% of the same 32 alone, none waiting over 5 s).

    .venv/bin/python bench/scorer_load.py [--requests 256] [--pairs 2] [--workdir DIR]
        [--processes 1 2]   (a table for each count of answering processes, one after the other)
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT / "tests"))  # the scorer's clients and how `up` starts it

from _bundle import bundle_features, bundle_settings  # noqa: E402
from scorer_clients import Hostile, ask_together, attempts, hostile_clients, resident_bytes  # noqa: E402
from services_fixtures import free_port, running_scorer, wait_champion_loaded  # noqa: E402

from deepsummit.contracts.champion import champion_version  # noqa: E402
from deepsummit.core.config import Settings  # noqa: E402
from deepsummit.core.context import RunContext  # noqa: E402
from deepsummit.core.errors import PipelineError  # noqa: E402
from deepsummit.services import supervisor as services  # noqa: E402
from deepsummit.train.stage import train_and_register  # noqa: E402

WORKDIR = Path(tempfile.gettempdir()) / "deepsummit-scorer-load"
LEVELS = (1, 4, 16, 32)
TARGET_SHARE, TARGET_WAIT_S = 0.9, 5.0


def champion_settings(workdir: Path) -> Settings:
    """Settings whose registry under `workdir` holds a champion, trained there first if not."""
    settings = bundle_settings(workdir, "tiny")
    try:
        champion_version(settings.mlflow)
    except PipelineError:
        print(f"training a tiny champion on the bundle under {workdir} ...", flush=True)
        _, report = bundle_features(workdir, "tiny")
        train_and_register(settings, RunContext(workdir / "runs" / "train"), report.directory)
    return settings


@dataclass
class Level:
    """What the askers of one row got, over its runs."""

    seconds: list[float] = field(default_factory=list)  # each request's wait
    statuses: Counter[int] = field(default_factory=Counter)
    wall_s: float = 0.0
    hostile: Hostile = field(default_factory=Hostile)

    def run(self, settings: Settings, askers: int, requests: int, hostile: bool) -> None:
        """`askers` at once, `requests` in all, beside the hostile clients or not."""
        with hostile_clients(settings) if hostile else nullcontext() as outcomes:
            answers, wall_s = ask_together(settings, attempts(askers), max(1, requests // askers))
        self.seconds += [a.seconds for asked in answers for a in asked]
        self.statuses.update(a.status for asked in answers for a in asked)
        self.wall_s += wall_s
        if outcomes is not None:
            self.hostile.slow += outcomes.slow
            self.hostile.big += outcomes.big

    @property
    def per_s(self) -> float:
        return len(self.seconds) / self.wall_s

    @property
    def not_200(self) -> dict[int, int]:
        return {status: n for status, n in self.statuses.items() if status != 200}

    def row(self, name: str, resident_mib: float) -> str:
        seconds = sorted(self.seconds)
        p99 = seconds[min(len(seconds) - 1, round(0.99 * len(seconds)))]
        return (
            f"| {name} | {len(seconds)} | {self.per_s:.1f} | {statistics.median(seconds):.3f} | "
            f"{p99:.3f} | {seconds[-1]:.3f} | {self.not_200 or '-'} | {resident_mib:.0f} |"
        )


def hostile_line(hostile: Hostile) -> str:
    slow = Counter(status for status, _ in hostile.slow)
    big = Counter(status for status, _ in hostile.big)
    cut_after = [seconds for _, seconds in hostile.slow] or [0.0]
    most_sent = max((sent for _, sent in hostile.big), default=0)
    return (
        f"the slow sender: {dict(slow)} after {min(cut_after):.1f} to {max(cut_after):.1f} s; "
        f"the 100 MB body: {dict(big)}, at most {most_sent / 2**20:.1f} MiB of it sent"
    )


def table(settings: Settings, requests: int, pairs: int) -> Iterator[str]:
    """The table's lines, level by level, then the target's. The 32 askers alone and beside
    the hostile clients take turns, `pairs` times, so that a machine slowing down slows both."""
    pid = services.recorded_pid(settings, services.SCORER)
    assert pid is not None
    yield "| askers | requests | per s | p50 s | p99 s | longest s | not 200 | scorer PSS MiB |"
    yield "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |"
    for askers in LEVELS[:-1]:
        level = Level()
        level.run(settings, askers, requests, hostile=False)
        yield level.row(str(askers), resident_bytes(pid) / 2**20)
    alone, beside = Level(), Level()
    for _ in range(pairs):
        alone.run(settings, LEVELS[-1], requests, hostile=False)
        beside.run(settings, LEVELS[-1], requests, hostile=True)
    resident_mib = resident_bytes(pid) / 2**20
    yield alone.row(f"{LEVELS[-1]}", resident_mib)
    yield beside.row(f"{LEVELS[-1]} + hostile", resident_mib)
    answered = "every request answered 200" if not beside.not_200 else beside.not_200
    yield ""
    yield hostile_line(beside.hostile)
    yield (
        f"{LEVELS[-1]} beside the hostile clients: {beside.per_s / alone.per_s:.0%} of the "
        f"throughput alone (target {TARGET_SHARE:.0%}), longest wait {max(beside.seconds):.2f} "
        f"s (target {TARGET_WAIT_S:g} s), {answered}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=256, help="requests at each level")
    parser.add_argument(
        "--pairs", type=int, default=2, help="turns of the 32 askers alone and beside the others"
    )
    parser.add_argument("--workdir", type=Path, default=WORKDIR)
    parser.add_argument(
        "--processes",
        type=int,
        nargs="+",
        default=[None],
        help="the scorer's answering processes, a table for each (default: as configured)",
    )
    args = parser.parse_args()
    settings = champion_settings(args.workdir)
    for processes in args.processes:
        measure(settings, args.workdir, processes, args.requests, args.pairs)


def measure(
    settings: Settings, workdir: Path, processes: int | None, requests: int, pairs: int
) -> None:
    """The table of a scorer answering in `processes` processes (None: as configured)."""
    overrides = {
        "paths": {"warehouse": str(settings.paths.warehouse), "var_dir": str(workdir)},
        "mlflow": {
            "tracking_uri": settings.mlflow.tracking_uri,
            "model_cache_dir": str(workdir / "model-cache"),
        },
        "services": {
            "run_dir": str(workdir / "services"),
            "scorer": True,
            "scorer_port": free_port(),
        },
    }
    if processes is not None:
        overrides["services"]["scorer_processes"] = processes
    with running_scorer(overrides) as scorer:
        wait_champion_loaded(scorer)
        svc = scorer.services
        print(
            f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; the scorer: "
            f"{svc.answering_processes} processes of {svc.scorer_threads} threads, a queue of "
            f"{svc.scorer_queue} each, read deadline "
            f"{svc.scorer_read_deadline_s:g} s, body at most {svc.scorer_max_body_bytes} bytes\n"
        )
        for line in table(scorer, requests, pairs):
            print(line, flush=True)
    print()


if __name__ == "__main__":
    main()
