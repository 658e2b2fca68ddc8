"""Wall time of whole `deepsummit predict` processes, from start to exit, against the configured
services and champion (`deepsummit up` and `make train` first), beside the same command of
another commit, or beside the same command answering in its own process:

    git worktree add --detach /tmp/deepsummit-0ab03f4 0ab03f4
    .venv/bin/python bench/predict_latency.py --baseline /tmp/deepsummit-0ab03f4 [--runs 7]
    .venv/bin/python bench/predict_latency.py --in-process

While `deepsummit up` runs the scorer, this checkout's command is answered by it; `--in-process`
adds the same command with `DEEPSUMMIT_SERVICES__SCORER=false`, which answers itself.

The baseline runs with this venv's Python, that checkout's src/ first on the path and this
checkout as the project folder (DEEPSUMMIT_PROJECT_DIR), so both commands read the same
warehouse, registry and settings. They alternate run by run, after a warm-up run each (the
first fills the champion's local copy), so that a machine slowing down slows both. Prints min,
median and max wall seconds of each, and the median ratio. The attempt is issue 42's (with what
the member changes: the same attempt at every age band's start and as the other sex):

    deepsummit predict --peak EVER --push-date 2019-05-20 --sex M --nationality USA --oxygen \\
        --commercial --age 65

`farm-bench -n 7 --vs 'BASELINE COMMAND' -- COMMAND` times the same pair with CPU seconds too.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
ATTEMPT = (
    "predict", "--peak", "EVER", "--push-date", "2019-05-20", "--sex", "M", "--nationality",
    "USA", "--oxygen", "--commercial", "--age", "65",
)  # fmt: skip


def wall_seconds(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    result = subprocess.run(command, env=env, cwd=PROJECT, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} exited {result.returncode}: {result.stderr[-2000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--baseline", type=Path, help="a checkout of the commit to compare with")
    parser.add_argument(
        "--in-process", action="store_true", help="also the command answering without the scorer"
    )
    args = parser.parse_args()
    command = [sys.executable, "-m", "deepsummit.cli.app", *ATTEMPT]
    commands = {"this checkout": (command, dict(os.environ))}
    if args.in_process:
        alone = {**os.environ, "DEEPSUMMIT_SERVICES__SCORER": "false"}
        commands["this checkout, in process (services.scorer = false)"] = (command, alone)
    if args.baseline:
        baseline_env = {
            **os.environ,
            "PYTHONPATH": str(args.baseline.resolve() / "src"),
            "DEEPSUMMIT_PROJECT_DIR": str(PROJECT),
        }
        commands[f"baseline {args.baseline}"] = (command, baseline_env)
    for argv, env in commands.values():
        wall_seconds(argv, env)  # warm-up: page cache, the champion's local copy
    seconds: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(args.runs):
        for name, (argv, env) in commands.items():
            seconds[name].append(wall_seconds(argv, env))

    print(f"`deepsummit {' '.join(ATTEMPT)}`, {args.runs} runs each, alternating")
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs\n")
    print("| command | min s | median s | max s |")
    print("| --- | ---: | ---: | ---: |")
    for name, values in seconds.items():
        print(
            f"| {name} | {min(values):.2f} | {statistics.median(values):.2f} | {max(values):.2f} |"
        )
    if len(seconds) > 1:
        first, *others = seconds.items()
        for name, values in others:
            ratio = statistics.median(first[1]) / statistics.median(values)
            print(f"\nmedian ratio {first[0]} / {name}: {ratio:.2f}")


if __name__ == "__main__":
    main()
