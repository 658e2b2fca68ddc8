"""How much of the backtest's out-of-time ECE is the year's base rate, which no map fitted on
earlier seasons can know.

Reads the backtest's held-out predictions (the transformer, uncalibrated; folds cached under
--bundle by bench/backtest.py, trained here if missing) and prints, per test year: rows, summit
rate, mean P, and the ECE of
- none: the model as it is;
- last year's offset: the logits shifted by the offset that best fitted the year before's
  held-out rows (a map that follows the rising summit rate);
- the year's own offset: shifted by the offset that best fits the judged year itself. An
  oracle, not a map: the floor that any map of the model's logits fitted before the year
  cannot beat without knowing the year's mood.
The same three for the newest `backtest.newest_folds` years pooled, as the backtest judges maps.

    .venv/bin/python bench/calibration_drift.py [--bundle /tmp/deepsummit-bundle] [--seeds 3]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import polars as pl
from _bundle import DEFAULT_BUNDLE, backtest_settings
from scipy.optimize import minimize_scalar
from scipy.special import expit
from sklearn.metrics import log_loss

from deepsummit.backtest.run import run_backtest
from deepsummit.contracts.snapshot import newest_features_dir
from deepsummit.train.comparison import TRANSFORMER, logit
from deepsummit.train.metrics import expected_calibration_error

RAW = f"raw_{TRANSFORMER}"


def best_offset(logits: np.ndarray, labels: np.ndarray) -> float:
    """The b minimising the log loss of σ(z + b): moves the base rate, keeps the ranking."""
    fit = minimize_scalar(
        lambda b: log_loss(labels, expit(logits + b), labels=[0, 1]),
        bounds=(-5.0, 5.0),
        method="bounded",
    )
    return float(fit.x)


def _parts(frame: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    return logit(frame[RAW].to_numpy()), frame["label"].to_numpy().astype(np.float64)


def row(name: str, judged: pl.DataFrame, held_out: pl.DataFrame) -> str:
    """One line of the table: `judged` is one or more test years' rows."""
    z, y = _parts(judged)
    shifted_before, shifted_own = np.empty_like(z), np.empty_like(z)
    years = judged["year"].to_numpy()
    for year in np.unique(years):
        rows = years == year
        before = held_out.filter(pl.col("year") == int(year) - 1)
        b_before = best_offset(*_parts(before)) if before.height else 0.0
        shifted_before[rows] = z[rows] + b_before
        shifted_own[rows] = z[rows] + best_offset(z[rows], y[rows])
    eces = [expected_calibration_error(y, expit(v)) for v in (z, shifted_before, shifted_own)]
    return (
        f"| {name} | {len(y):,} | {y.mean():.3f} | {expit(z).mean():.3f} | "
        + " | ".join(f"{e:.3f}" for e in eces)
        + " |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE)
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--seeds", type=int, help="transformer seeds (default: the profile's)")
    args = parser.parse_args()

    seeds = {"train": {"seeds": args.seeds}} if args.seeds else None
    settings = backtest_settings(args.bundle, args.profile, overrides=seeds)
    report = run_backtest(settings, newest_features_dir(settings.features.features_dir))
    held_out = report.held_out.sort("year")
    years = held_out["year"].unique().sort().to_list()
    newest = years[-settings.backtest.newest_folds :]
    print(
        "| test year | rows | summit rate | mean P | ECE none | ECE last year's offset "
        "| ECE the year's own offset (oracle) |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for year in years[1:]:
        print(row(str(year), held_out.filter(pl.col("year") == year), held_out))
    label = f"{newest[0]}–{newest[-1]} pooled"
    print(row(label, held_out.filter(pl.col("year").is_in(newest)), held_out))


if __name__ == "__main__":
    main()
