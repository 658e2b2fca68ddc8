"""Which training profile should `make train` ship? Candidate profiles judged on the backtest's
folds, each answering its test year as the registered model answers.

Answer: the `cpu` profile as it ships: one training of 4 ensemble members, hidden size 32, 2
layers, 3 epochs, the spec's linear numeric tokens, recency weights (half-life 5 years), the
calendar inputs. Chosen on the folds before every scored season (`--first 2012 --last 2013`, the
members of 2012-2013, the seasons the trees' settings were chosen on too): of the candidates that
keep `make train` within its budget, recency weights was furthest ahead on the member ranking
beyond noise, its group error and calibration level; six epochs and batch 256 were further
ahead, at twice the training. Written down in docs/evaluation.md, "How the `cpu` profile was
chosen".

Candidate training profiles judged by the backtest, to choose the profile out of time instead
of on one split.

Each candidate is the profile plus dotted overrides (None unsets a value). All run the same
rolling-origin folds on one snapshot, each answering its test year as the registered model
answers (deepsummit/backtest/run.py; each candidate's folds are cached under its own key, so a
candidate already run costs nothing, and the baselines' fold scores are shared), and each is
paired with the first candidate (the reference: the profile as it ships) on identical held-out
rows:

- the member seasons (the members file, to Spring 2019): mean within-season AUC over the
  ordinary seasons, and the group error (member-weighted mean |mean P − observed| over the
  member groups of at least 50 members: deepsummit/train/member_groups.py), one expedition
  bootstrap for every candidate;
- the expedition-record seasons (Autumn 2019 on): mean within-season AUC of expedition success
  and the mean gap between mean P and the summit fraction (deepsummit/train/expeditions.py);
- the push-day Spearman (a bootstrap over the same peak-seasons);

and beside them the members' band, where each seed's best epoch fell, and the minutes its folds
took when they were trained. The boosted trees of the same folds are the last rows, paired with
the reference the same way.

    .venv/bin/python bench/studies/which_training_profile.py \
        --bundle /tmp/deepsummit-bundle --first 2012 --last 2013
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared helpers

import numpy as np
import polars as pl
from _bundle import DEFAULT_BUNDLE, backtest_settings

from deepsummit.backtest.outcome import HELD_OUT_KEYS
from deepsummit.backtest.push_days import summarise
from deepsummit.backtest.run import missing_folds, run_backtest
from deepsummit.backtest.seasons import season_table
from deepsummit.backtest.summary import BacktestReport
from deepsummit.contracts.member_groups import MEMBER_COLUMNS
from deepsummit.contracts.snapshot import newest_features_dir, read_features
from deepsummit.core.config import Settings
from deepsummit.core.sections import BacktestConfig
from deepsummit.train.baselines import CATBOOST, LIGHTGBM
from deepsummit.train.bootstrap import Interval, interval, replicate_weights, weighted_ece
from deepsummit.train.comparison import TRANSFORMER, difference_name
from deepsummit.train.expeditions import expedition_table
from deepsummit.train.member_groups import ALL_PEAKS, group_calibration

# The extension inputs before the calendar joined them.
WITHOUT_CALENDAR = ["agency_success_rate", "staff_per_member", "days_at_base_camp"]
SHIPPED_EXTRAS = [*WITHOUT_CALENDAR, "day_of_year", "days_in_season"]
BASE_ON_GPU = "the spec's base (H=256, 6 layers): 1 training of 4 members, on a GPU"
CANDIDATES: dict[str, dict[str, Any]] = {
    "the profile": {},
    "linear numeric tokens (the spec's)": {"model.numeric_embedding": "linear"},
    "piecewise-linear numeric tokens": {"model.numeric_embedding": "piecewise"},
    "no map": {"train.calibration": "none", "train.calibration_shifts_by": []},
    "six epochs": {"train.max_epochs": 6},
    "hidden size 64": {"model.hidden_size": 64},
    "no calendar": {"features.extra_inputs": WITHOUT_CALENDAR},
    "equal season weights (the profile before)": {"train.recency_half_life": None},
    "team role token": {"features.extra_inputs": [*SHIPPED_EXTRAS, "team_role"]},
    "learning rate 4e-3": {"train.learning_rate": 4e-3},
    "batch size 256": {"train.batch_size": 256},
    "no dropout": {"model.dropout": 0.0, "model.drop_path_rate": 0.0},
    "8 ensemble members": {"model.ensemble_size": 8},
    "3 layers": {"model.num_layers": 3},
    # The spec's size with what the cpu profile adopted (one training of 4 members): its folds
    # train on a GPU machine (bench/gpu.py --prepare-folds, then its GPU half, then
    # --judge-folds), never here, where one epoch of it takes minutes.
    BASE_ON_GPU: {
        "profile": "base",
        "model.ensemble_size": 4,
        "model.ensemble_layers": 1,
        "train.seeds": 1,
    },
}


def nested(dotted: dict[str, Any]) -> dict[str, Any]:
    """{"train.seeds": 5} → {"train": {"seeds": 5}}, None kept (it unsets the profile's value)."""
    tree: dict[str, Any] = {}
    for key, value in dotted.items():
        node = tree
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return tree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--bundle", type=Path, default=DEFAULT_BUNDLE, help="working folder (default: %(default)s)"
    )
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--first", type=int, default=2016, help="first test year")
    parser.add_argument("--last", type=int, help="last test year (default: the newest)")
    parser.add_argument("--threads", type=int, help="torch and tree threads (default: torch's)")
    parser.add_argument(
        "--only", nargs="*", help="run these candidates (by name) besides the first"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    names = [
        n
        for i, n in enumerate(CANDIDATES)
        if i == 0 or (n in args.only if args.only else n != BASE_ON_GPU)
    ]
    compare(args.bundle, args.profile, names, args.first, args.last, args.threads)


def candidate_settings(
    bundle: Path,
    profile: str,
    name: str,
    first: int,
    last: int | None,
    threads: int | None = None,
) -> Settings:
    """The profile (or the candidate's own, "profile") with the candidate's overrides, its
    backtest testing `first`…`last` on the bundle's snapshot."""
    overrides = nested({**CANDIDATES[name], "train.num_threads": threads})
    backtest = {"first_test_year": first, "last_test_year": last, **overrides.pop("backtest", {})}
    return backtest_settings(bundle, overrides.pop("profile", profile), backtest, overrides)


def compare(
    bundle: Path,
    profile: str,
    names: list[str],
    first: int,
    last: int | None,
    threads: int | None = None,
) -> None:
    """Run (or read back) each candidate's folds and print the table, paired with names[0]."""
    reports: dict[str, BacktestReport] = {}
    for name in names:
        settings = candidate_settings(bundle, profile, name, first, last, threads)
        snapshot = newest_features_dir(settings.features.features_dir)
        untrained = missing_folds(settings, snapshot)
        if name == BASE_ON_GPU and untrained:
            raise SystemExit(
                f"{name}: folds {', '.join(f.name for f in untrained)} have not been trained; "
                "they train on a GPU machine (bench/gpu.py: --prepare-folds, its GPU half, "
                "--judge-folds)"
            )
        reports[name] = run_backtest(settings, snapshot)
        print(f"{name}: done", flush=True)
    print(table(reports, settings.backtest, read_features(snapshot)))


def table(
    reports: dict[str, BacktestReport], config: BacktestConfig, features: pl.DataFrame
) -> str:
    names = tuple(reports)
    first = names[0]
    trees = (LIGHTGBM, CATBOOST)
    held_out = reports[first].held_out.select(*HELD_OUT_KEYS, *trees)
    for name, report in reports.items():
        frame = report.held_out.select(*HELD_OUT_KEYS, pl.col(TRANSFORMER).alias(name))
        held_out = held_out.join(frame, on=HELD_OUT_KEYS)
    models = (*names, *trees)
    members = season_table(
        held_out.filter(pl.col("record") == "member"),
        models,
        config.min_season_rows,
        config.disaster_seasons,
    )
    expeditions = expedition_table(
        held_out.filter(pl.col("record") == "expedition"),
        models,
        config.min_season_expeditions,
        config.unscored_seasons,
    )
    push_days = summarise(_paired_seasons(reports), names)
    member_rows = held_out.filter(pl.col("record") == "member").join(
        features.select("expid", "member_id", "year", *MEMBER_COLUMNS),
        on=["expid", "member_id", "year"],
    )
    groups = group_calibration(
        member_rows,
        {m: member_rows[m].to_numpy() for m in models},
        ALL_PEAKS,
        config.min_group_members,
    )
    lines = [
        f"{held_out.height:,} held-out rows: {members.rows:,} of member seasons "
        f"({members.scored_seasons} scored), the rest of {expeditions.scored_seasons} scored "
        f"expedition-record seasons; {len(push_days.seasons)} push-day peak-seasons. Paired "
        f"differences are candidate − {first}.",
        "",
        "| candidate | member seasons: within-season AUC | − first | group error | − first "
        "| expedition seasons: within-season AUC | − first | mean P gap | push-day Spearman "
        "| − first | band | held-out ECE | − first | best epoch / epochs run "
        "| fold min (when trained) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | ---: | --- | --- | --- "
        "| ---: |",
    ]
    ece = _paired_ece(held_out, models, first)
    for name in models:
        report = reports.get(name)
        pairs = (
            [tuple(p) for o in report.folds for p in o.summary.get("epochs", [])] if report else []
        )
        last = sum(1 for best, ran in pairs if best == ran)
        ran = sorted({ran for _, ran in pairs})
        minutes = sum(o.summary.get("seconds", 0.0) for o in report.folds) / 60 if report else 0
        push = (
            (
                push_days.mean_spearman[name].render(),
                paired_gain(push_days.differences, first, name),
            )
            if report
            else ("–", "")
        )
        lines.append(
            f"| {name} | {members.within_ordinary[name].render()} "
            f"| {paired_gain(members.differences, first, name)} "
            f"| {groups.error[name].render()} | {paired_gain(groups.differences, first, name)} "
            f"| {expeditions.within[name].render()} "
            f"| {paired_gain(expeditions.differences, first, name)} "
            f"| {expeditions.gap[name].render()} | {push[0]} | {push[1]} "
            + (f"| {report.seed_spread:.3f} " if report else "| – ")
            + f"| {ece[name][0].render()} | {ece[name][1]} "
            + (
                f"| best = last in {last} of {len(pairs)}; ran {ran} | {minutes:.1f} |"
                if report
                else "| – | – |"
            )
        )
    return "\n".join(lines)


def _paired_ece(
    held_out: pl.DataFrame, models: tuple[str, ...], first: str
) -> dict[str, tuple[Interval, str]]:
    """Each model's ECE on every held-out row, out of time (each fold's map was fitted on its
    validation years), and its difference from `first`'s over the same expedition bootstrap."""
    labels = held_out["label"].to_numpy().astype(np.float64)
    replicates = replicate_weights(held_out["expid"].to_numpy())
    ones = np.ones((1, len(labels)))
    point = {m: weighted_ece(labels, held_out[m].to_numpy(), ones)[0] for m in models}
    drawn = {m: weighted_ece(labels, held_out[m].to_numpy(), replicates) for m in models}
    paired = {}
    for m in models:
        gap = interval(point[m] - point[first], drawn[m] - drawn[first])
        signed = f"{gap.estimate:+.3f} [{gap.low:+.3f}, {gap.high:+.3f}]"
        paired[m] = (interval(point[m], drawn[m]), "" if m == first else signed)
    return paired


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
                    decision={n: s.decision[TRANSFORMER] for n, s in skills.items()},
                )
            )
    return paired


def paired_gain(differences: dict[str, Any], first: str, name: str) -> str:
    """candidate − first (the tables hold first − candidate); blank for the first itself."""
    if name == first:
        return ""
    difference = differences[difference_name(first, name)]
    if np.isnan(difference.estimate):  # no season of this kind was scored
        return "–"
    return f"{-difference.estimate:+.3f} [{-difference.high:+.3f}, {-difference.low:+.3f}]"


if __name__ == "__main__":
    main()
