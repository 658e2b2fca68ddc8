"""Where the test suite's CPU goes, by kind of process: runs a command (by default `make
test`) and samples every process's own CPU seconds (utime + stime from /proc,
twice a second) until it ends, then prints CPU seconds and process counts by kind (xdist
workers, flow-run processes, Prefect and MLflow servers, `deepsummit` commands, browsers, ...),
the wall time and the exit code.

    .venv/bin/python bench/suite_cpu.py                      # make test
    .venv/bin/python bench/suite_cpu.py -- .venv/bin/python -m pytest -q tests/e2e

`/usr/bin/time` misses what it does not wait for (the servers `deepsummit up` detaches); this
counts every process of the machine that ran while the command did, less what each had used
before it started, so run it on an otherwise quiet machine. A process that lived under half a
second may be missed, and one that had exited but was not yet reaped shows without its command
line ("exited before it was named").
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import time
from collections import Counter
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
TICKS = os.sysconf("SC_CLK_TCK")
SAMPLE_S = 0.5
MAKE_TEST = ["make", "test"]
# The first pattern a command line matches names its kind.
KINDS = (
    ("Prefect server", r"prefect server|uvicorn.*prefect|prefect\.server"),
    ("MLflow server", r"mlflow.*server|uvicorn.*mlflow|gunicorn|mlflow\.server|huey"),
    ("Prefect worker", r"prefect worker"),
    ("flow run (prefect.engine)", r"prefect\.engine|flow-run execute"),
    ("PostgreSQL", r"postgres"),
    ("browser", r"chrom"),
    ("xdist worker", r"import sys;exec\(eval"),
    ("pytest", r"pytest"),
    ("deepsummit command", r"deepsummit"),
    ("prefect command", r"bin/prefect "),
    ("multiprocessing child", r"multiprocessing"),
)

Key = tuple[str, str]  # pid, start time in ticks (a pid may be reused)


def kind(command: str) -> str:
    if not command.strip():
        return "exited before it was named"
    return next((name for name, pattern in KINDS if re.search(pattern, command)), "other")


def processes() -> dict[Key, tuple[float, str]]:
    """Each process's own CPU seconds so far and its command line."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:  # ended while being read
            continue
        fields = stat.rsplit(")", 1)[1].split()
        found[(pid, fields[19])] = ((int(fields[11]) + int(fields[12])) / TICKS, command)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", nargs="*", help="default: make test")
    args = parser.parse_args()
    before = {key: cpu for key, (cpu, _) in processes().items()}
    started = time.monotonic()
    child = subprocess.Popen(args.command or MAKE_TEST, cwd=PROJECT)
    used: dict[Key, tuple[float, str]] = {}
    while child.poll() is None:
        for key, (cpu, command) in processes().items():
            # A process last seen exited (not yet reaped) has no command line: keep the one
            # an earlier sample saw.
            named = command or used.get(key, (0.0, ""))[1]
            used[key] = (cpu - before.get(key, 0.0), named)
        time.sleep(SAMPLE_S)
    wall_s = time.monotonic() - started
    seconds, count = Counter(), Counter()
    for cpu, command in used.values():
        if cpu > 0:
            seconds[kind(command)] += cpu
            count[kind(command)] += 1
    for name, cpu in seconds.most_common():
        print(f"{cpu:8.1f} s CPU  {count[name]:5d} processes  {name}")
    total = sum(seconds.values())
    print(f"{total:8.1f} s CPU in all, {wall_s:.0f} s wall ({total / wall_s:.2f} cores busy)")
    print(f"exit code {child.returncode}")


if __name__ == "__main__":
    main()
