"""What the weather peaks gain or lose when every peak joins training, and each peak group's
figures, on the single split of a features snapshot built with every peak.

Two arms train on the same snapshot. "every peak" is what the train stage does: all train rows,
the snapshot's own preprocessing. "weather peaks" keeps only the train and validation rows of the
peaks with weather and refits the preprocessing on them, as the pipeline trained before every
peak joined. Both score the same test rows of the weather peaks, season by season (AUC, Brier,
ECE with expedition-bootstrap intervals; each arm calibrated on its own validation rows as the
train stage does), and the paired difference of the mean within-season AUC says what joining
gained. The transformer is the mean of the profile's seeds; LightGBM runs on the same rows. Then
the every-peak arm's test rows, per peak group (deepsummit/features/groups.py).

    .venv/bin/python bench/every_peak.py --bundle /tmp/deepsummit-bundle
    .venv/bin/python bench/every_peak.py --features var/features/<digest12> --seeds 1
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import polars as pl
from _training import (
    add_snapshot_options,
    bench_settings,
    print_wall,
    render_signed,
    snapshot_location,
    train_seeds,
)

from deepsummit.backtest.seasons import SeasonTable, season_table
from deepsummit.contracts.calibration import Calibrator
from deepsummit.contracts.preprocessing import Preprocessor
from deepsummit.contracts.snapshot import SPLITS, load_features, read_features, read_windows
from deepsummit.core.config import Settings
from deepsummit.features.groups import PEAK_GROUPS, WEATHER_PEAKS, peak_groups
from deepsummit.train.baselines import lightgbm
from deepsummit.train.comparison import TRANSFORMER, logit
from deepsummit.train.recipe import transformer_predictions
from deepsummit.train.trainer import training_slice

LIGHTGBM = "LightGBM"
EVERY_PEAK, WEATHER_ONLY = "every peak", "weather peaks"
KEYS = ("expid", "year", "season", "peakid", "label")


def arm_predictions(
    settings: Settings,
    preprocessor: Preprocessor,
    rows: dict[str, pl.DataFrame],
    windows: pl.DataFrame,
    test: pl.DataFrame,
) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """Each model's calibrated P on `test`, trained on `rows` (train, validation); and what the
    arm cost."""
    started = time.perf_counter()
    arrays = {name: preprocessor.transform(frame, windows) for name, frame in rows.items()}
    arrays["test"] = preprocessor.transform(test, windows)
    results = train_seeds(settings, arrays, preprocessor.model_dimensions())
    train = settings.train
    models = [
        transformer_predictions(results, arrays),
        lightgbm(
            training_slice(arrays["train"], train.max_train_rows, train.seed),
            arrays["validation"],
            arrays["test"],
            train.seed,
            train.num_threads,
        ),
    ]
    calibrated = {}
    for model in models:
        calibrator = Calibrator.fit(
            train.calibration, logit(model.validation), arrays["validation"].label
        )
        calibrated[model.name] = calibrator.probabilities(logit(model.test))
    cost = {
        "train rows": len(arrays["train"]),
        "seconds": time.perf_counter() - started,
        "best epochs": [r.best_epoch for r in results],
    }
    return calibrated, cost


def weather_only_preprocessor(
    template: Preprocessor, rows: dict[str, pl.DataFrame], windows: pl.DataFrame
) -> tuple[Preprocessor, dict[str, pl.DataFrame]]:
    kept = {name: frame.filter(pl.col("has_weather")) for name, frame in rows.items()}
    return template.refit(kept["train"], windows, arm="weather peaks only"), kept


def season_lines(table: SeasonTable) -> list[str]:
    models = table.models
    lines = [
        "| season | rows | summit rate | " + " | ".join(f"AUC {m}" for m in models) + " | note |",
        "| --- | ---: | ---: | " + " | ".join("---" for _ in models) + " | --- |",
    ]
    for season in table.seasons:
        aucs = [season.scores[m].auc.render(3) if season.scored else "–" for m in models]
        lines.append(
            f"| {season.season} | {season.rows:,} | {season.summit_rate:.3f} | "
            + " | ".join(aucs)
            + f" | {season.note} |"
        )
    within = [table.within[m].render(3) for m in models]
    lines.append("| mean within season | | | " + " | ".join(within) + " | |")
    pooled = [table.pooled[m].render(3) for m in models]
    lines.append("| pooled | | | " + " | ".join(pooled) + " | |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_snapshot_options(parser)
    args = parser.parse_args()
    started, load_before = time.perf_counter(), os.getloadavg()
    settings = bench_settings(args)
    snapshot = snapshot_location(args, settings)
    _, template = load_features(snapshot)
    features, windows = read_features(snapshot), read_windows(snapshot)
    rows = {name: features.filter(pl.col("split") == name) for name in SPLITS}
    test = rows.pop("test")
    weather_test = test.filter(pl.col("has_weather"))
    if not weather_test.height:
        raise SystemExit(f"{snapshot}: no test rows on a peak with weather; nothing to pair")

    every, every_cost = arm_predictions(settings, template, rows, windows, test)
    refit, weather_rows = weather_only_preprocessor(template, rows, windows)
    only, only_cost = arm_predictions(settings, refit, weather_rows, windows, weather_test)

    min_rows, disasters = settings.backtest.min_season_rows, settings.backtest.disaster_seasons
    on_weather = test["has_weather"].to_numpy()
    print(
        f"snapshot {snapshot.name}: {settings.train.seeds} seeds × {settings.train.max_epochs} "
        f"epochs ({settings.profile}); test rows {test.height:,}, of them on weather peaks "
        f"{weather_test.height:,}"
    )
    for arm, cost in ((EVERY_PEAK, every_cost), (WEATHER_ONLY, only_cost)):
        print(f"- arm '{arm}': {cost}")
    for model in (TRANSFORMER, LIGHTGBM):
        paired = weather_test.select(KEYS).with_columns(
            pl.Series(EVERY_PEAK, every[model][on_weather]), pl.Series(WEATHER_ONLY, only[model])
        )
        table = season_table(paired, (EVERY_PEAK, WEATHER_ONLY), min_rows, disasters)
        (difference,) = table.differences.values()
        print(f"\n## {model}: the weather peaks' test rows, trained on each arm\n")
        print("\n".join(season_lines(table)))
        print(
            f"\nevery peak − weather peaks, mean within-season AUC: {render_signed(difference)}; "
            f"Brier per season: "
            + ", ".join(
                f"{s.season} {s.scores[EVERY_PEAK].brier.estimate:.4f} vs "
                f"{s.scores[WEATHER_ONLY].brier.estimate:.4f}"
                for s in table.seasons
                if s.scored
            )
        )

    grouped = test.select(KEYS).with_columns(
        pl.Series(TRANSFORMER, every[TRANSFORMER]), pl.Series(LIGHTGBM, every[LIGHTGBM])
    )
    grouped = grouped.join(peak_groups(features), on="peakid", how="left")
    for group in PEAK_GROUPS:
        part = grouped.filter(pl.col("group") == group)
        print(f"\n## every-peak arm, {group}: {part.height:,} test rows on "
              f"{part['peakid'].n_unique()} peak(s)\n")  # fmt: skip
        if not part.height:
            continue
        table = season_table(part, (TRANSFORMER, LIGHTGBM), min_rows, disasters)
        print("\n".join(season_lines(table)))
        if group == WEATHER_PEAKS:
            continue  # its pairing is the one above
        (difference,) = table.differences.values()
        print(f"\ntransformer − LightGBM, mean within-season AUC: {render_signed(difference)}")
    print_wall(started, load_before)


if __name__ == "__main__":
    main()
