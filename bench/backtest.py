"""The rolling-origin backtest of the whole data bundle, and what it costs on this machine.

Builds the bundle's warehouse and features snapshot under --bundle (the records, weather and
features stages as plain functions, no services), then runs the backtest stage's folds
(deepsummit/backtest/run.py) with the profile's settings and prints its report and the wall
time of each fold. Fold results are cached under <bundle>/backtest: a second run with the same
options reads them back (its time is the report's only); pass --fresh to train every fold again.

    .venv/bin/python bench/backtest.py --bundle /tmp/deepsummit-bundle [--first 2008 --last 2019]
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import shutil
import time
from pathlib import Path

import torch
from _bundle import DEFAULT_BUNDLE, backtest_settings

from deepsummit.backtest.report import markdown, write_report
from deepsummit.backtest.run import run_backtest
from deepsummit.contracts.snapshot import newest_features_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--bundle",
        type=Path,
        default=DEFAULT_BUNDLE,
        help="working folder (default: %(default)s)",
    )
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--first", type=int, help="first test year (default: the settings')")
    parser.add_argument("--last", type=int, help="last test year")
    parser.add_argument("--seeds", type=int, help="transformer seeds (default: the profile's)")
    parser.add_argument("--fresh", action="store_true", help="drop cached folds first")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")

    folds = {"first_test_year": args.first, "last_test_year": args.last}
    settings = backtest_settings(
        args.bundle,
        args.profile,
        {k: v for k, v in folds.items() if v},
        {"train": {"seeds": args.seeds}} if args.seeds else None,
    )
    if args.fresh:
        shutil.rmtree(settings.backtest.output_dir, ignore_errors=True)

    started = time.perf_counter()
    report = run_backtest(settings, newest_features_dir(settings.features.features_dir))
    wall = time.perf_counter() - started
    files = write_report(report)
    print(markdown(report))
    print(
        f"profile {settings.profile} ({settings.train.seeds} seeds, {settings.train.max_epochs} "
        f"epochs); {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch "
        f"threads {torch.get_num_threads()}"
    )
    for outcome in report.folds:
        seconds = outcome.summary.get("seconds")
        state = "cached" if outcome.cached else f"{seconds:.0f} s" if seconds else "-"
        epochs = outcome.summary.get("epochs", [])
        print(f"fold {outcome.fold.name}: {outcome.fold.describe()}; {state}; "
              f"best epoch / epochs per seed {epochs}; {outcome.skipped or ''}")  # fmt: skip
    print(f"wall time of this run: {wall / 60:.1f} min; report {files['report']}")


if __name__ == "__main__":
    main()
