"""How far does the answer move with the random seeds?

Answer, when last measured (the profile of five trainings of one network): two trainings with
disjoint seeds lay 0.018 apart on a test row (0.034 with three seeds), the reason the profile
then trained five. The profile now trains one network of 4 members, whose band is 0.030 wide on
a held-out row. Written down in docs/evaluation.md, "How far the seeds move the answer".

How much the answer moves with the random seeds: the registered answer is the calibrated
mean probability of the ensemble's members (every member of every seed's network;
deepsummit/serve/scoring.py), its band their spread.

Trains the profile's ensemble twice on the bundle's features snapshot, with disjoint seed sets
(42, 43, … and 142, 143, …), each as the train stage judges it (trained on every season before
the test split, through the map of its own member check), and prints:
- the mean band width (highest − lowest member's calibrated P) on the test rows, per ensemble;
- how far the two ensembles' answers lie apart on the test rows (mean, 99th percentile, max);
- the same on a planned attempt: a commercial Everest member with oxygen (age 40, USA, male)
  on every push day from 5 to 31 May 2019, scored through the serving path.

    .venv/bin/python bench/studies/how_far_seeds_move_the_answer.py \
        --bundle /tmp/deepsummit-bundle [--seeds 5]
        [--max-epochs 8 --patience 3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared helpers

import numpy as np
import polars as pl
from _bundle import DEFAULT_BUNDLE, bundle_features, bundle_settings

from deepsummit.contracts.artifact import ModelArtifact
from deepsummit.contracts.distribution import DistributionProfile
from deepsummit.contracts.snapshot import load_history, newest_features_dir
from deepsummit.core.planned import planned_frame, planned_record
from deepsummit.core.warehouse import connect
from deepsummit.serve.inference import ensemble_logit
from deepsummit.serve.predict import daily_weather
from deepsummit.serve.scoring import score
from deepsummit.train.recipe import (
    Recipe,
    check_inputs,
    member_check,
    preprocessing_for,
    refit,
)
from deepsummit.train.stage import TrainingData

EXAMPLE = {"peak": "EVER", "age": 40, "sex": "M", "nationality": "USA", "oxygen": True,
           "commercial": True}  # fmt: skip
EXAMPLE_DAYS = [dt.date(2019, 5, day) for day in range(5, 32)]


def ensemble(settings, data: TrainingData, first_seed: int) -> tuple[ModelArtifact, np.ndarray]:
    """The profile's seeds from `first_seed` on, as the train stage judges it: trained on every
    season before the test split, through the map of its member check. The artifact and each
    member's logit on the test rows (members × rows)."""
    recipe = Recipe(settings.model, settings.train.model_copy(update={"seed": first_seed}))
    before, test = data.snapshot.filter(pl.col("split") != "test"), data.split("test")
    cutoff = int(before["year"].max())
    with tempfile.TemporaryDirectory() as checkpoints:
        inputs = check_inputs(recipe, data.snapshot, data.windows, data.preprocessor, cutoff)
        check = member_check(recipe, inputs, Path(checkpoints) / "check")
        preprocessor = preprocessing_for(data.preprocessor, before, data.windows)
        newest = refit(
            recipe, before, data.windows, preprocessor, check.epochs(recipe.training),
            Path(checkpoints) / "newest",
        )  # fmt: skip
    calibrator = check.calibrator(settings.train)
    artifact = ModelArtifact(
        networks=[r.model for r in newest.results],
        seeds=[r.seed for r in newest.results],
        preprocessor=preprocessor,
        calibrator=calibrator,
        history=load_history(data.directory),
        drift_reference=DistributionProfile({}, {}, "none: scored only"),
    )
    return artifact, newest.logits(test, data.windows)


def example_requests(settings, source: str) -> pl.DataFrame:
    with connect(settings.paths.warehouse, read_only=True) as con:
        rows = [
            {
                **planned_record({**EXAMPLE, "push_date": day}),
                "weather_source": source,
                **daily_weather(con, "EVER", day, source),
            }
            for day in EXAMPLE_DAYS
        ]
    return planned_frame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--bundle",
        type=Path,
        default=DEFAULT_BUNDLE,
        help="working folder (default: %(default)s)",
    )
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--seeds", type=int, help="seeds per ensemble (default: the profile's)")
    parser.add_argument("--max-epochs", type=int, help="epochs (default: the profile's)")
    parser.add_argument("--patience", type=int, help="early-stopping patience")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if not (args.bundle / "features").exists():
        bundle_features(args.bundle, args.profile)
    base = bundle_settings(args.bundle, args.profile)
    given = {"seeds": args.seeds, "max_epochs": args.max_epochs, "patience": args.patience}
    train = base.train.model_copy(update={k: v for k, v in given.items() if v is not None})
    settings = base.model_copy(update={"train": train})
    data = TrainingData.read(newest_features_dir(settings.features.features_dir))
    requests = example_requests(settings, data.preprocessor.weather_source)
    answers, test_means = [], []
    print(
        f"profile {settings.profile}: {settings.train.seeds} seeds per ensemble, "
        f"{settings.train.max_epochs} epochs; test rows {data.split('test').height:,}\n"
    )
    print(
        "| ensemble | mean band on test rows | mean band, EVER 5–31 May 2019 "
        "| P range over those days |"
    )
    print("| --- | ---: | ---: | --- |")
    for first_seed in (42, 142):
        artifact, logits = ensemble(settings, data, first_seed)
        members = artifact.calibrator.probabilities(logits, data.split("test"))
        scored = score(artifact, requests)
        answers.append(scored.probability)
        test_means.append(
            artifact.calibrator.probabilities(ensemble_logit(logits), data.split("test"))
        )
        print(
            f"| seeds {first_seed}… | {(members.max(0) - members.min(0)).mean():.3f} "
            f"| {(scored.high - scored.low).mean():.3f} "
            f"| {np.nanmin(scored.probability):.3f}–{np.nanmax(scored.probability):.3f} |"
        )
    test_moves = np.abs(test_means[0] - test_means[1])
    example_moves = np.abs(answers[0] - answers[1])
    print(
        f"\nThe two ensembles' answers apart: test rows mean {test_moves.mean():.3f}, 99th "
        f"percentile {np.percentile(test_moves, 99):.3f}, max {test_moves.max():.3f}; "
        f"EVER example mean {np.nanmean(example_moves):.3f}, max {np.nanmax(example_moves):.3f}"
    )


if __name__ == "__main__":
    main()
