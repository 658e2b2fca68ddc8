"""Which member groups should the calibration map shift, and under what penalty? Maps judged on
the backtest's held-out member seasons, without training anything.

Answer: age alone, penalty 0.01 (`train.calibration_shifts_by`, `train.calibration_shift_penalty`).
On the folds that choose (the members of 2012-2013, before every scored season) no map lowers
the group error beyond noise; age, penalty 0.01 is level with the temperature alone on the
ranking (+0.000 [-0.001, +0.001]) and the group error (+0.001 [+0.000, +0.001]), and stays for
the member target (every Everest age band within 0.08). Written down in docs/evaluation.md,
"Which member groups the map shifts".

Calibration maps with member-group shifts, judged on the backtest's held-out member seasons
without training anything: does a map that also shifts each member group's logit answer the
groups better, and what does it cost the ranking?

Every map is a temperature fitted on the member check (deepsummit/train/recipe.py). A candidate
adds one shift per group of the families it names (deepsummit/contracts/member_groups.py),
fitted with it on the same check rows by log loss with an L2 penalty on the shifts, centred on
the check so that the answers' level stays the temperature's (deepsummit/contracts/
calibration.py): the served recipe's map is "age, penalty 0.01" (`train.calibration_shifts_by`,
`train.calibration_shift_penalty`). Each fold's map is fitted on that fold's cached member
check and applied to its cached held-out answers (the folds of the profile of record, trained
by bench/studies/which_training_profile.py); the temperature alone, the map served before, is
the reference every candidate is paired with, on the same expedition bootstrap (within-season
AUC of the member seasons, and the group error: the member-weighted mean |mean P − observed|
over groups of at least 50 members).

    .venv/bin/python bench/studies/which_calibration_shifts.py --bundle /tmp/deepsummit-bundle \
        [--penalties 0.01 0.1] [--candidate "hidden size 64"]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared helpers

import numpy as np
import polars as pl
from _bundle import DEFAULT_BUNDLE
from scipy.special import logit
from which_training_profile import CANDIDATES, candidate_settings, paired_gain

from deepsummit.backtest.cache import fold_directories, read_check, trainings_directory
from deepsummit.backtest.run import fold_jobs
from deepsummit.backtest.seasons import season_table
from deepsummit.contracts.calibration import Calibrator
from deepsummit.contracts.member_groups import GROUP_FAMILIES, MEMBER_COLUMNS
from deepsummit.contracts.snapshot import newest_features_dir
from deepsummit.core.config import Settings
from deepsummit.serve.inference import ensemble_logit
from deepsummit.train.baselines import LIGHTGBM
from deepsummit.train.member_groups import ALL_PEAKS, GroupCalibration, calibration_by_scope

# The test years that choose: members' own records, before the backtest's scored 2016-2025.
SELECTION_YEARS = (2012, 2013)
# Issue 42: no group of LARGE_GROUP or more members off by more than its interval + MARGIN.
LARGE_GROUP = 100
MARGIN = 0.05
REFERENCE = "temperature alone"
FAMILIES = {
    "age": ("age",),
    "age, hired staff": ("age", "hired staff"),
    "age, role": ("age", "role"),
    "every family": tuple(GROUP_FAMILIES),
}


def held_out_answers(
    settings: Settings, years: list[int], penalties: list[float]
) -> tuple[pl.DataFrame, tuple[str, ...]]:
    """The member seasons' held-out rows with every map's answer as a column, and the maps'
    names (the temperature alone first)."""
    snapshot = newest_features_dir(settings.features.features_dir)
    directory, _ = fold_directories(settings, snapshot)
    frames = []
    for job in fold_jobs(settings, snapshot, years):
        check = read_check(trainings_directory(settings, snapshot), job.check)
        if check is None:
            raise SystemExit(
                f"fold {job.fold.name} was not trained: run bench/studies/which_training_profile.py"
            )
        path = directory / f"fold-{job.fold.name}-held-out.parquet"
        held = (
            pl.read_parquet(path)
            .filter(pl.col("record") == "member")
            .join(
                job.test_rows.select("expid", "member_id", *MEMBER_COLUMNS),
                on=["expid", "member_id"],
            )
        )
        # The transformer's held-out answer before its map is the ensemble's probability.
        test_logit = logit(np.clip(held["raw_transformer"].to_numpy(), 1e-7, 1 - 1e-7))
        check_logit = ensemble_logit(check.logits)
        labels = check.rows["label"].cast(pl.Float64).to_numpy()
        maps = {REFERENCE: Calibrator.fit("temperature", check_logit, labels)}
        for name, families in FAMILIES.items():
            for penalty in penalties:
                maps[f"{name}, penalty {penalty:g}"] = Calibrator.fit(
                    "temperature", check_logit, labels, check.rows, families, penalty
                )
        answers = {name: fitted.probabilities(test_logit, held) for name, fitted in maps.items()}
        frames.append(held.with_columns(**{k: pl.Series(v) for k, v in answers.items()}))
    return pl.concat(frames), tuple(answers)


def worst_large_group(scopes: dict[str, GroupCalibration], model: str) -> str:
    """The group of `LARGE_GROUP`+ members, on any scope, whose gap lies furthest beyond the
    half-width of its observed rate's interval + `MARGIN`: by how much, and which."""
    excess = {
        f"{scope}: {row.family} {row.group}": abs(row.gap[model].estimate)
        - (row.observed.high - row.observed.low) / 2
        - MARGIN
        for scope, table in scopes.items()
        for row in table.rows
        if row.members >= LARGE_GROUP
    }
    where = max(excess, key=excess.__getitem__)
    return f"{excess[where]:+.3f} ({where})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE)
    parser.add_argument("--penalties", type=float, nargs="+", default=[0.01, 0.1])
    parser.add_argument(
        "--years", type=int, nargs="+", default=list(SELECTION_YEARS),
        help="the folds' test years (default: %(default)s, before every scored season)",
    )  # fmt: skip
    parser.add_argument(
        "--candidate", default="the profile", choices=CANDIDATES,
        help="whose cached folds (bench/studies/which_training_profile.py) to read",
    )  # fmt: skip
    args = parser.parse_args()
    settings = candidate_settings(
        args.bundle, "cpu", args.candidate, min(args.years), max(args.years)
    )
    config = settings.backtest
    rows, maps = held_out_answers(settings, args.years, args.penalties)
    models = (*maps, LIGHTGBM)
    seasons = season_table(rows, models, config.min_season_rows, config.disaster_seasons)
    scopes = calibration_by_scope(
        rows, {m: rows[m].to_numpy() for m in models}, config.min_group_members,
        config.separate_peaks,
    )  # fmt: skip
    groups = scopes[ALL_PEAKS]
    oldest = {r.group: r for r in groups.rows if r.family == "age"}["60 and over"]
    print(
        f"{rows.height:,} held-out member rows of {seasons.scored_seasons} scored seasons "
        f"({', '.join(map(str, args.years))}); differences are candidate − {REFERENCE}.\n"
    )
    print(
        f"| map | within-season AUC | − {REFERENCE} | group error | − {REFERENCE} "
        f"| 60 and over: mean P − observed ({oldest.members} members) "
        f"| groups of {LARGE_GROUP}+: furthest beyond their interval + {MARGIN} |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for model in models:
        gains = [paired_gain(table.differences, REFERENCE, model) for table in (seasons, groups)]
        print(
            f"| {model} | {seasons.within_ordinary[model].render()} | {gains[0]} "
            f"| {groups.error[model].render()} | {gains[1]} | {oldest.gap[model].render()} "
            f"| {worst_large_group(scopes, model)} |"
        )


if __name__ == "__main__":
    main()
