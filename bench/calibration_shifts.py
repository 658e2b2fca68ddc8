"""Calibration maps with member-group shifts, judged on the backtest's held-out member seasons
without training anything: does a map that also shifts each member group's logit answer the
groups better, and what does it cost the ranking?

The served map is a temperature fitted on the member check (deepsummit/train/recipe.py): one
scale on the network's logit. A candidate adds one shift per group of the families it names
(deepsummit/contracts/member_groups.py), fitted with it on the same check rows by log loss with
an L2 penalty on the shifts, and centred on the check so that the answers' level stays the
temperature's: z' = s·z + Σ_f (b_f[group] − mean over the check of b_f). Each fold's map is
fitted on that fold's cached member check and applied to its cached held-out answers (the
folds of the profile of record, trained by bench/backtest_profiles.py); the temperature map
refitted here is the reference every candidate is paired with, on the same expedition
bootstrap (within-season AUC of the member seasons, and the group error: the member-weighted
mean |mean P − observed| over groups of at least 50 members).

    .venv/bin/python bench/calibration_shifts.py --bundle /tmp/deepsummit-bundle \
        [--penalties 0.01 0.1] [--candidate "hidden size 64"]
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
from _bundle import DEFAULT_BUNDLE
from backtest_profiles import CANDIDATES, candidate_settings, paired_gain
from scipy.optimize import minimize
from scipy.special import expit, logit

from deepsummit.backtest.cache import fold_directories, read_check
from deepsummit.backtest.run import fold_jobs
from deepsummit.backtest.seasons import season_table
from deepsummit.contracts.calibration import Calibrator
from deepsummit.contracts.member_groups import GROUP_FAMILIES, MEMBER_COLUMNS
from deepsummit.contracts.snapshot import newest_features_dir
from deepsummit.core.config import Settings
from deepsummit.serve.inference import ensemble_logit
from deepsummit.train.baselines import LIGHTGBM
from deepsummit.train.member_groups import ALL_PEAKS, GroupCalibration, calibration_by_scope

MEMBER_SEASONS = (2016, 2017, 2018, 2019)  # the test years of members' own records
# Issue 42: no group of LARGE_GROUP or more members off by more than its interval + MARGIN.
LARGE_GROUP = 100
MARGIN = 0.05
REFERENCE = "temperature (served)"
FAMILIES = {
    "age": ("age",),
    "age, hired staff": ("age", "hired staff"),
    "age, role": ("age", "role"),
    "every family": tuple(GROUP_FAMILIES),
}


def group_indicators(rows: pl.DataFrame, levels: list[tuple[str, str]]) -> np.ndarray:
    """(rows, levels): 1 where the row is in the group (a row whose family is null in none)."""
    groups = rows.select(**{family: GROUP_FAMILIES[family] for family, _ in levels})
    return np.stack(
        [(groups[f] == g).fill_null(False).cast(pl.Float64).to_numpy() for f, g in levels], 1
    )


@dataclass(frozen=True)
class ShiftMap:
    """p = σ(scale · z + (indicators − centre) · shifts): the centre is the check's share of
    each group, so the shifts average to nothing over the check."""

    scale: float
    shifts: np.ndarray
    centre: np.ndarray

    def probabilities(self, z: np.ndarray, indicators: np.ndarray) -> np.ndarray:
        return expit(self.scale * z + (indicators - self.centre) @ self.shifts)

    @classmethod
    def fit(
        cls, z: np.ndarray, labels: np.ndarray, indicators: np.ndarray, penalty: float
    ) -> ShiftMap:
        """The map minimising the mean log loss plus `penalty` × the shifts' sum of squares."""
        centre = indicators.mean(axis=0)

        def loss(params: np.ndarray) -> float:
            fitted = cls(params[0], params[1:], centre)
            p = np.clip(fitted.probabilities(z, indicators), 1e-9, 1 - 1e-9)
            log_loss = -np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p))
            return float(log_loss + penalty * np.sum(params[1:] ** 2))

        start = np.r_[1.0, np.zeros(indicators.shape[1])]
        params = minimize(loss, start, method="L-BFGS-B").x
        return cls(float(params[0]), params[1:], centre)


def held_out_answers(
    settings: Settings, penalties: list[float]
) -> tuple[pl.DataFrame, tuple[str, ...]]:
    """The member seasons' held-out rows with every map's answer as a column, and the maps'
    names (the served temperature first)."""
    snapshot = newest_features_dir(settings.features.features_dir)
    directory, _ = fold_directories(settings, snapshot)
    frames = []
    for job in fold_jobs(settings, snapshot, list(MEMBER_SEASONS)):
        check = read_check(directory, job.check)
        if check is None:
            raise SystemExit(
                f"fold {job.fold.name} was not trained: run bench/backtest_profiles.py"
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
        answers = {
            REFERENCE: Calibrator.fit("temperature", check_logit, check.labels).probabilities(
                test_logit
            )
        }
        for name, families in FAMILIES.items():
            present = check.rows.select(**{f: GROUP_FAMILIES[f] for f in families})
            levels = [
                (f, g) for f in families for g in sorted(present[f].drop_nulls().unique().to_list())
            ]
            on_check, on_test = group_indicators(check.rows, levels), group_indicators(held, levels)
            for penalty in penalties:
                fitted = ShiftMap.fit(check_logit, check.labels, on_check, penalty)
                answers[f"{name}, penalty {penalty:g}"] = fitted.probabilities(test_logit, on_test)
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
        "--candidate", default="the profile", choices=CANDIDATES,
        help="whose cached folds (bench/backtest_profiles.py) to read",
    )  # fmt: skip
    args = parser.parse_args()
    settings = candidate_settings(args.bundle, "cpu", args.candidate, min(MEMBER_SEASONS), None)
    config = settings.backtest
    rows, maps = held_out_answers(settings, args.penalties)
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
        f"({', '.join(map(str, MEMBER_SEASONS))}); differences are candidate − {REFERENCE}.\n"
    )
    print(
        "| map | within-season AUC | − served | group error | − served | 60 and over: mean P "
        f"− observed ({oldest.members} members) | groups of {LARGE_GROUP}+: furthest beyond "
        f"their interval + {MARGIN} |"
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
