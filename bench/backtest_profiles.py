"""Candidate training profiles judged by the backtest, to choose the profile's hyperparameters
and epoch count out of time instead of on one split.

Each candidate is the profile plus dotted overrides. All run the same rolling-origin folds on
one snapshot (deepsummit/backtest/run.py; each candidate's folds are cached under its own key,
so a candidate already run costs nothing), and each is paired with the first candidate (the
reference) on identical held-out rows: the transformer's mean within-season AUC over
the ordinary seasons (one expedition bootstrap for all), its push-day Spearman (a bootstrap over
the same peak-seasons), the out-of-time ECE of the calibration each would choose, the seeds'
band, the epochs each seed ran and where its best was, and the minutes its folds took when
they were trained (the cache keeps each fold's time).

    .venv/bin/python bench/backtest_profiles.py --bundle /tmp/deepsummit-bundle --first 2016
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
from pathlib import Path
from typing import Any

import polars as pl
from _bundle import DEFAULT_BUNDLE, backtest_settings

from deepsummit.backtest.push_days import summarise
from deepsummit.backtest.run import HELD_OUT_KEYS, BacktestReport, run_backtest
from deepsummit.backtest.seasons import season_table
from deepsummit.contracts.snapshot import newest_features_dir
from deepsummit.core.config import BacktestConfig, nested_overrides
from deepsummit.train.comparison import TRANSFORMER, difference_name

# Each names its seed count, so that the table stays what it was when the profile's own changes.
CANDIDATES: dict[str, dict[str, Any]] = {
    "3 seeds, 3 epochs": {"train.seeds": 3},
    "3 seeds, 6 epochs, patience 3": {"train.seeds": 3, "train.max_epochs": 6, "train.patience": 3},
    "3 seeds, 6 epochs, patience 3, lr 1e-3": {
        "train.seeds": 3,
        "train.max_epochs": 6,
        "train.patience": 3,
        "train.learning_rate": 1e-3,
    },
    "5 seeds, 3 epochs": {"train.seeds": 5},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--bundle", type=Path, default=DEFAULT_BUNDLE, help="working folder (default: %(default)s)"
    )
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--first", type=int, default=2016, help="first test year")
    parser.add_argument("--last", type=int, default=2019, help="last test year")
    parser.add_argument(
        "--only", nargs="*", help="run these candidates (by name) besides the first"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")

    names = [n for i, n in enumerate(CANDIDATES) if i == 0 or not args.only or n in args.only]
    reports: dict[str, BacktestReport] = {}
    for name in names:
        settings = backtest_settings(
            args.bundle,
            args.profile,
            {"first_test_year": args.first, "last_test_year": args.last},
            nested_overrides(CANDIDATES[name]),
        )
        reports[name] = run_backtest(settings, newest_features_dir(settings.features.features_dir))
    print(table(reports, settings.backtest))


def table(reports: dict[str, BacktestReport], config: BacktestConfig) -> str:
    names = tuple(reports)
    held_out = None
    for name, report in reports.items():
        frame = report.held_out.select(*HELD_OUT_KEYS, pl.col(TRANSFORMER).alias(name))
        held_out = frame if held_out is None else held_out.join(frame, on=HELD_OUT_KEYS)
    seasons = season_table(held_out, names, config.min_season_rows, config.disaster_seasons)
    push_days = summarise(_paired_seasons(reports), names)
    first = names[0]
    lines = [
        f"{held_out.height:,} held-out rows, {seasons.scored_seasons} seasons scored; "
        f"{len(push_days.seasons)} push-day peak-seasons. Paired differences are candidate − "
        f"{first}.",
        "",
        "| candidate | within-season AUC | − first | push-day Spearman | − first "
        "| ECE out of time (map) | seed band | best epoch / epochs run | fold min (when trained) |",
        "| --- | --- | --- | --- | --- | --- | ---: | --- | ---: |",
    ]
    for name, report in reports.items():
        pairs = [tuple(p) for o in report.folds for p in o.summary.get("epochs", [])]
        last = sum(1 for best, ran in pairs if best == ran)
        ran = sorted({ran for _, ran in pairs})
        chosen = report.calibration.chosen
        minutes = sum(o.summary.get("seconds", 0.0) for o in report.folds) / 60
        gain = _gain(seasons.differences, first, name)
        push_gain = _gain(push_days.differences, first, name)
        lines.append(
            f"| {name} | {seasons.within_ordinary[name].render()} "
            f"| {gain} "
            f"| {push_days.mean_spearman[name].render()} "
            f"| {push_gain} "
            f"| {report.calibration.ece[chosen]:.3f} ({chosen}) | {report.seed_spread:.3f} "
            f"| best = last in {last} of {len(pairs)}; ran {ran} | {minutes:.1f} |"
        )
    return "\n".join(lines)


def _paired_seasons(reports: dict[str, BacktestReport]) -> list:
    """Each push-day peak-season every candidate scored, with the transformer's Spearman of
    each candidate side by side."""
    by_key: dict[tuple, dict[str, Any]] = {}
    for name, report in reports.items():
        for skill in report.push_days.seasons:
            by_key.setdefault((skill.peakid, skill.year, skill.season), {})[name] = skill
    paired = []
    for skills in by_key.values():
        if len(skills) == len(reports):
            some = next(iter(skills.values()))
            paired.append(
                dataclasses.replace(
                    some,
                    spearman={n: s.spearman[TRANSFORMER] for n, s in skills.items()},
                    hit={n: s.hit[TRANSFORMER] for n, s in skills.items()},
                )
            )
    return paired


def _gain(differences: dict[str, Any], first: str, name: str) -> str:
    """candidate − first (the tables hold first − candidate); blank for the first itself."""
    if name == first:
        return ""
    difference = differences[difference_name(first, name)]
    return f"{-difference.estimate:+.3f} [{-difference.high:+.3f}, {-difference.low:+.3f}]"


if __name__ == "__main__":
    main()
