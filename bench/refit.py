"""The newest seasons, judged by expedition: does the recipe beat the boosted trees there, does
its mean P follow the summit fraction, and what does refitting on the seasons after the
validation gain?

On a features snapshot of the bundle (split: train ≤ 2020, validation 2021–22, test 2023–25,
all three of expedition records from Autumn 2019 on), with the training rows identical for
every model:

- "judged": the profile's transformer trained on the train split, validated (early stopping,
  calibration) on 2021–22, as the train stage's evaluation does; logistic regression, LightGBM
  and CatBoost on the same rows.
- "refit through 2022": the same recipe (the judged arm's epochs and calibration map) trained on
  every season through 2022, the validation seasons included, as the train stage's refit does
  through the newest season.

Both are scored on the expedition records of 2023–2025 (deepsummit/train/expeditions.py: AUC of
expedition success within each season, Brier score of the team's summit fraction, the gap
between mean P and the members' summit fraction), paired over one expedition bootstrap.

    .venv/bin/python bench/refit.py --bundle /tmp/deepsummit-bundle --threads 2
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import polars as pl
from _training import add_snapshot_options, bench_settings, print_wall, snapshot_location

from deepsummit.contracts.arrays import ensemble_probability, member_logits
from deepsummit.contracts.calibration import Calibrator
from deepsummit.train.baselines import configured_baselines
from deepsummit.train.comparison import TRANSFORMER, logit
from deepsummit.train.expeditions import expedition_table
from deepsummit.train.recipe import Recipe, train_seeds, transformer_predictions, with_recency
from deepsummit.train.stage import TrainingData

REFIT = "transformer, refit through 2022"
MIN_EXPEDITIONS = 30


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_snapshot_options(parser)
    args = parser.parse_args()
    started, load = time.perf_counter(), os.getloadavg()
    settings = bench_settings(args)
    data = TrainingData.read(snapshot_location(args, settings))
    train_config = settings.train
    test = data.rows["test"]

    with tempfile.TemporaryDirectory() as checkpoints:
        judged = train_seeds(
            Recipe.of(settings),
            data.training_arrays(train_config),
            data.preprocessor.model_dimensions(),
            Path(checkpoints) / "judged",
        )
        transformer = transformer_predictions(judged, data.arrays)
        calibrator = Calibrator.fit(
            train_config.calibration,
            logit(transformer.validation),
            data.arrays["validation"].label,
        )
        # The refit: every season through the validation's last, the judged epochs.
        through = pl.concat([data.rows["train"], data.rows["validation"]])
        preprocessor = data.preprocessor.refit(through, data.windows)
        arrays = with_recency(
            preprocessor.transform(through, data.windows),
            through["year"].to_numpy(),
            train_config,
        )
        refit = train_seeds(
            Recipe.of(settings),
            {"train": arrays, "validation": None},
            preprocessor.model_dimensions(),
            Path(checkpoints) / "refit",
            epochs={r.seed: r.best_epoch for r in judged},
        )
    refit_inputs = preprocessor.transform(test, data.windows).model_inputs()
    refit_test = ensemble_probability(member_logits([r.model for r in refit], refit_inputs))
    baselines = configured_baselines(
        data.arrays, data.preprocessor.categorical_cardinalities, train_config
    )
    columns = {
        TRANSFORMER: calibrator.probabilities(logit(transformer.test)),
        REFIT: calibrator.probabilities(logit(refit_test)),
    }
    for model in baselines:
        map_ = Calibrator.fit(
            train_config.calibration, logit(model.validation), data.arrays["validation"].label
        )
        columns[model.name] = map_.probabilities(logit(model.test))
    rows = test.select("expid", "year", "season", "record", "label").with_columns(
        **{name: pl.Series(values) for name, values in columns.items()}
    )
    expedition_rows = rows.filter(pl.col("record") == "expedition")
    print(
        f"test: {expedition_rows.height:,} members of "
        f"{expedition_rows.select('expid', 'year').n_unique():,} expedition records, "
        f"{test['year'].min()}–{test['year'].max()}; calibration {train_config.calibration}; "
        f"profile {settings.profile}, {train_config.seeds} seed(s), "
        f"{settings.model.ensemble_size} member(s)"
    )
    for first, others in (
        (TRANSFORMER, [m.name for m in baselines]),
        (TRANSFORMER, [REFIT]),
    ):
        table = expedition_table(expedition_rows, (first, *others), MIN_EXPEDITIONS, {})
        print()
        print(table.markdown())
    print(
        "transformer seconds: judged "
        f"{sum(r.seconds for r in judged):.0f}, refit {sum(r.seconds for r in refit):.0f}; "
        + ", ".join(f"{m.name} {m.train_seconds:.0f}" for m in baselines)
    )
    print_wall(started, load)


if __name__ == "__main__":
    main()
