"""Are the project's trees at full strength? Its best tree against a plain CatBoost that sees
nine plan columns, and the served transformer against both, on `make train`'s test split.

Answer: in docs/evaluation.md, "Are the trees at full strength?" (the table this prints).

The plain CatBoost is a practitioner's first try, trained as the train stage trains its models
(every season before the test split, every row: members' own records and the climbing members
of expedition records): CatBoost's defaults (1,000 iterations, learning rate 0.03, depth 6) on
the plan of the expedition only (peak, route, season, style, commercial, oxygen plan, team size,
peak height, day of the year). The project's models are read from the train stage's run: each
test row's answer as served (`evaluation/held_out.parquet`, logged by the train stage). Every
model is scored by expedition, per season (deepsummit/train/expeditions.py), and each pair is
compared on the same expedition bootstrap.

    .venv/bin/python bench/studies/is_the_best_tree_as_good_as_a_plain_catboost.py \
        [--answers held_out.parquet] [--snapshot var/features/<digest>]

Without --answers it reads the champion's run from the configured tracking server; without
--snapshot, the newest features snapshot.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import catboost
import mlflow
import polars as pl

from deepsummit.contracts.champion import current_champion
from deepsummit.contracts.snapshot import newest_features_dir, read_features
from deepsummit.core.config import load_settings
from deepsummit.train.baselines import CATBOOST, LIGHTGBM
from deepsummit.train.comparison import TRANSFORMER
from deepsummit.train.evaluation import HELD_OUT_KEYS
from deepsummit.train.expeditions import ExpeditionTable, expedition_table

PLAN_CATEGORIES = ("peakid", "route1", "season", "style")
PLAN_NUMBERS = ("is_commercial", "oxygen_planned", "totmembers", "heightm", "day_of_year")
PLAIN = "plain CatBoost, nine plan columns"
THREADS = 2


def champion_answers(tracking_uri: str, name: str, alias: str) -> pl.DataFrame:
    """The held-out answers the champion's training run logged."""
    client = mlflow.MlflowClient(tracking_uri)
    version = current_champion(client, name, alias)
    if version is None:
        raise SystemExit(f"no {name}@{alias} at {tracking_uri}: run `make train` first")
    with tempfile.TemporaryDirectory() as folder:
        path = client.download_artifacts(version.run_id, "evaluation/held_out.parquet", folder)
        return pl.read_parquet(path)


def plan_frame(rows: pl.DataFrame):
    frame = rows.select(
        *(pl.col(c).fill_null("none") for c in PLAN_CATEGORIES),
        *(pl.col(c).cast(pl.Float64) for c in PLAN_NUMBERS),
    )
    return frame.to_pandas()


def plain_catboost(features: pl.DataFrame, test: pl.DataFrame) -> pl.Series:
    """The plain CatBoost trained on every season before the test split, its P on `test`."""
    train = features.filter(pl.col("split") != "test")
    model = catboost.CatBoostClassifier(
        iterations=1000, learning_rate=0.03, depth=6, thread_count=THREADS,
        allow_writing_files=False, verbose=False, random_seed=0,
    )  # fmt: skip
    model.fit(plan_frame(train), train["label"].to_numpy(), cat_features=list(PLAN_CATEGORIES))
    return pl.Series(PLAIN, model.predict_proba(plan_frame(test))[:, 1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--answers", type=Path, help="a held_out.parquet of a train stage run")
    parser.add_argument("--snapshot", type=Path, help="the features snapshot it trained on")
    args = parser.parse_args()
    settings = load_settings()
    mlflow_config = settings.mlflow
    answers = (
        pl.read_parquet(args.answers)
        if args.answers
        else champion_answers(
            mlflow_config.tracking_uri, mlflow_config.registered_model, mlflow_config.champion_alias
        )
    )
    snapshot = args.snapshot or newest_features_dir(settings.features.features_dir)
    features = read_features(snapshot)
    test = features.filter(pl.col("split") == "test")
    joined = answers.join(
        test.with_columns(plain_catboost(features, test)).select(*HELD_OUT_KEYS, PLAIN),
        on=list(HELD_OUT_KEYS),
    )
    if joined.height != answers.height:
        raise SystemExit(f"{answers.height} answers, {joined.height} matched in {snapshot}")
    records = joined.filter(pl.col("record") == "expedition")
    trees = [name for name in (LIGHTGBM, CATBOOST) if name in records.columns]
    models = (TRANSFORMER, *trees, PLAIN)
    backtest = settings.backtest

    def judged(names: tuple[str, ...]) -> ExpeditionTable:
        return expedition_table(
            records, names, backtest.min_season_expeditions, backtest.unscored_seasons
        )

    table = judged(models)
    best = max(trees, key=lambda name: table.within[name].estimate)
    print(f"test split by expedition: {records.height} members, {table.scored_seasons} seasons\n")
    print("| model | mean within-season AUC (expedition success) |\n| --- | --- |")
    for name in models:
        print(f"| {name} | {table.within[name].render()} |")
    print()
    for first, other in ((best, PLAIN), (TRANSFORMER, best), (TRANSFORMER, PLAIN)):
        for name, difference in judged((first, other)).differences.items():
            print(f"- {name}: {difference.render()} (paired)")


if __name__ == "__main__":
    main()
