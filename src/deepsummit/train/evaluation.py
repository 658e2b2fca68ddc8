"""The train stage's evaluation of the recipe as served, logged to the active MLflow run.

Two held-out checks, each answered by models trained only on seasons before it:

- the test split (the newest seasons): the transformer refit on every season before it and
  answering through its map, against the baselines trained on the same rows, with intervals,
  by expedition where the test split holds expedition records, and in plots;
- the member check (deepsummit/train/recipe.py): the newest seasons of members' own records,
  judged member group by member group (deepsummit/train/member_groups.py). The map is fitted on
  these rows, so the groups are judged on answers whose map was fitted on the other years of
  the check (`MemberCheck.out_of_fold`).

The member check also chooses the model that is served (deepsummit/train/blending.py): the
transformer alone, or blended with the best tree. A blend is judged on the test split beside
every model, as `SERVED_BLEND`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import mlflow
import numpy as np
import polars as pl

from deepsummit.contracts.arrays import FeatureArrays
from deepsummit.contracts.blend import mix, parts_line
from deepsummit.contracts.calibration import Calibrator
from deepsummit.core.seasons import season_name
from deepsummit.core.sections import BacktestConfig, TrainConfig
from deepsummit.serve.inference import ensemble_probability, member_logits
from deepsummit.train.baselines import ModelPredictions
from deepsummit.train.blending import served_weight
from deepsummit.train.bootstrap import (
    Interval,
    paired_auc_difference,
    replicate_weights,
    weighted_auc,
)
from deepsummit.train.comparison import (
    TRANSFORMER,
    Comparison,
    SeedSpread,
    compare,
    logit,
    slug,
)
from deepsummit.train.expeditions import ExpeditionTable, expedition_table
from deepsummit.train.member_groups import ALL_PEAKS, GroupCalibration, calibration_by_scope
from deepsummit.train.metrics import auc_by_group
from deepsummit.train.plots import plot_calibration, plot_roc
from deepsummit.train.recipe import MemberCheck, out_of_fold_answers, transformer_predictions
from deepsummit.train.tracking import log_plots
from deepsummit.train.trainer import TrainResult

WITHOUT_MAP = f"{TRANSFORMER}, without its map"
SERVED_BLEND = "served blend"  # the transformer and the best tree as one model
# What identifies a test row, and its outcome, in the held-out answers of the run.
HELD_OUT_KEYS = ("expid", "member_id", "year", "season", "peakid", "record", "label")


@dataclass(frozen=True)
class HeldOut:
    """The test split as the evaluation reads it: its rows and their arrays as served (the
    preprocessing of the models that answer them)."""

    rows: pl.DataFrame  # features snapshot rows
    arrays: FeatureArrays

    @property
    def groups(self) -> np.ndarray:
        """Each row's expedition: what the bootstrap resamples."""
        return self.rows.select(pl.format("{}/{}", "expid", "year")).to_series().to_numpy()

    @property
    def seasons(self) -> np.ndarray:
        return (
            self.rows.select(season_name(pl.col("year"), pl.col("season"))).to_series().to_numpy()
        )


@dataclass(frozen=True)
class TreeLead:
    """The transformer against the best tree on the member check's members, each through its
    map fitted on the check's other years: AUC of each, their paired difference, and the model
    served on that evidence (deepsummit/train/blending.py)."""

    tree: str
    transformer_auc: float
    tree_auc: float
    difference: Interval  # transformer − tree
    weight: float  # the transformer's in the served model: 1.0 when it answers alone
    tree_answers: np.ndarray  # the tree's on the check's rows (map out of fold)

    @property
    def blended(self) -> bool:
        return self.weight < 1.0

    @property
    def served(self) -> str:
        """Which models answer, with their weights."""
        return parts_line(self.tree, self.weight) if self.blended else TRANSFORMER

    def describe(self) -> str:
        return (
            f"member check AUC: transformer {self.transformer_auc:.3f}, {self.tree} "
            f"{self.tree_auc:.3f}, transformer − {self.tree} {self.difference.render()}; "
            f"served: {self.served}"
        )


@dataclass(frozen=True)
class Evaluation:
    comparison: Comparison
    served: dict[str, np.ndarray]  # each model's answer on the test rows, as served
    expeditions: ExpeditionTable | None  # the test split's expedition records, by expedition
    member_groups: dict[str, GroupCalibration]  # the member check, by scope
    member_answers: np.ndarray  # the transformer's on the check's rows (map out of fold)
    tree_lead: TreeLead | None  # None without a tree among the baselines

    @property
    def group_error(self) -> float:
        return self.member_groups[ALL_PEAKS].error[TRANSFORMER].estimate

    @property
    def served_model(self) -> str:
        """The name of the model served: the transformer's, or SERVED_BLEND."""
        lead = self.tree_lead
        return SERVED_BLEND if lead is not None and lead.blended else TRANSFORMER

    @property
    def served_parts(self) -> str:
        """The models the registered version answers with, and their weights."""
        return self.tree_lead.served if self.tree_lead is not None else TRANSFORMER

    @property
    def served_member_answers(self) -> np.ndarray:
        """The served model's answers on the member check's rows (maps out of fold)."""
        return served_check_answers(self.tree_lead, self.member_answers)


def served_check_answers(lead: TreeLead | None, member_answers: np.ndarray) -> np.ndarray:
    """The served model's answers on the member check's rows, from the transformer's
    (`member_answers`) and, for a blend, its tree's (maps out of fold)."""
    if lead is None or not lead.blended:
        return member_answers
    return mix(member_answers, lead.tree_answers, lead.weight)


def evaluate(
    held_out: HeldOut,
    transformer: list[TrainResult],
    baselines: list[ModelPredictions],
    check: MemberCheck,
    calibrator: Calibrator,
    train_config: TrainConfig,
    backtest: BacktestConfig,
    run_dir: Path,
    served_setting: str = "auto",
) -> Evaluation:
    """Judge the recipe on both checks and log it all (see the module docstring);
    `calibrator`: the map fitted on the whole check, the one the registered model carries, of
    the recipe's `train_config` (what the check's out-of-fold maps are fitted by);
    `served_setting`: `baselines.served`."""
    member_answers = check.out_of_fold(train_config)
    lead = lead_over_trees(
        check.rows, train_config, tree_checks(baselines), member_answers, served_setting
    )
    models = [transformer_predictions(transformer, held_out.arrays), *baselines]
    maps = {m.name: m.calibrator for m in baselines if m.calibrator is not None}
    maps[TRANSFORMER] = calibrator
    if lead is not None and lead.blended:
        models.insert(0, blended_predictions(models, maps, lead, held_out.rows))
    comparison = compare(
        models,
        maps,
        held_out.arrays.label,
        held_out.groups,
        held_out.seasons,
        held_out.rows,
    )
    comparison = dataclasses.replace(
        comparison, seeds=seed_spread(transformer, held_out, calibrator)
    )
    served = {
        m.name: comparison.calibrators[m.name].probabilities(logit(m.test), held_out.rows)
        for m in models
    }
    evaluation = Evaluation(
        comparison,
        served,
        held_out_expeditions(backtest, held_out.rows, served),
        member_groups_judged(check, lead, member_answers, backtest),
        member_answers,
        lead,
    )
    log_evaluation(evaluation, check, transformer)
    log_held_out_answers(held_out.rows, served, run_dir / "held_out.parquet")
    mlflow.log_params({f"rounds.{slug(m.name)}": m.rounds for m in baselines if m.rounds})
    _group_aucs(held_out.rows, held_out.arrays.label, served[TRANSFORMER])
    _log_plots(run_dir / "plots", held_out.arrays.label, models, served, transformer[0])
    return evaluation


def tree_checks(baselines: list[ModelPredictions]) -> dict[str, np.ndarray]:
    """Each tree's own probabilities on the member check's rows (a tree counts rounds; the
    logistic regression does not)."""
    return {m.name: m.check for m in baselines if m.rounds and m.check is not None}


def member_groups_judged(
    check: MemberCheck, lead: TreeLead | None, member_answers: np.ndarray, backtest: BacktestConfig
) -> dict[str, GroupCalibration]:
    """The member check by member group: the served model first (what `predict` names the
    member's least sure groups by), the transformer, and the transformer without its map."""
    judged = {TRANSFORMER: member_answers, WITHOUT_MAP: ensemble_probability(check.logits)}
    if lead is not None and lead.blended:
        judged = {SERVED_BLEND: served_check_answers(lead, member_answers), **judged}
    return calibration_by_scope(
        check.rows, judged, backtest.min_group_members, backtest.separate_peaks
    )


def blended_predictions(
    models: list[ModelPredictions],
    maps: dict[str, Calibrator],
    lead: TreeLead,
    rows: pl.DataFrame,
) -> ModelPredictions:
    """The served blend on the test rows: its parts' answers, each through its map, mixed
    (deepsummit/contracts/blend.py). Its answer is served as it is: no map of its own. On other
    rows it answers its parts' own probabilities mixed, as every model's `predict` answers
    before its map."""
    parts = {m.name: m for m in models if m.name in (TRANSFORMER, lead.tree)}
    answers = {name: maps[name].probabilities(logit(m.test), rows) for name, m in parts.items()}

    def predict(arrays: FeatureArrays) -> np.ndarray:
        own = {name: m.predict(arrays) for name, m in parts.items()}
        return mix(own[TRANSFORMER], own[lead.tree], lead.weight)

    return ModelPredictions(
        SERVED_BLEND,
        mix(answers[TRANSFORMER], answers[lead.tree], lead.weight),
        sum(m.train_seconds for m in parts.values()),
        sum(m.predict_seconds_per_1000 for m in parts.values()),
        predict,
        Calibrator("none"),
    )


def lead_over_trees(
    rows: pl.DataFrame,
    train_config: TrainConfig,
    tree_checks: dict[str, np.ndarray],
    member_answers: np.ndarray,
    served: str = "auto",
) -> TreeLead | None:
    """`TreeLead` of the best tree on the member check (by its own AUC there), paired by an
    expedition bootstrap of the check's `rows`; `tree_checks`: each tree's own probabilities
    on them, `member_answers`: the transformer's answers; `served`: the `baselines.served`
    setting, which the model served follows."""
    trees = {
        name: out_of_fold_answers(train_config, logit(answers), rows)
        for name, answers in tree_checks.items()
    }
    if not trees:
        return None
    labels = rows["label"].cast(pl.Float64).to_numpy()
    whole = np.ones((1, len(labels)))
    aucs = {name: float(weighted_auc(labels, answers, whole)[0]) for name, answers in trees.items()}
    best = max(aucs, key=aucs.__getitem__)
    groups = rows.select(pl.format("{}/{}", "expid", "year")).to_series().to_numpy()
    difference = paired_auc_difference(
        labels, member_answers, trees[best], replicate_weights(groups)
    )
    return TreeLead(
        best,
        float(weighted_auc(labels, member_answers, whole)[0]),
        aucs[best],
        difference,
        served_weight(served, difference, labels, member_answers, trees[best]),
        trees[best],
    )


def log_held_out_answers(rows: pl.DataFrame, served: dict[str, np.ndarray], path: Path) -> None:
    """Each test row's answer of every model, as served, in the run's `evaluation/` folder:
    what a comparison with a model outside the stage pairs with, row by row."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows.select(*HELD_OUT_KEYS).with_columns(
        **{name: pl.Series(values) for name, values in served.items()}
    ).write_parquet(path)
    mlflow.log_artifact(str(path), "evaluation")


def log_evaluation(
    evaluation: Evaluation, check: MemberCheck, transformer: list[TrainResult]
) -> None:
    """The figures and tables of the evaluation in the active MLflow run."""
    groups = evaluation.member_groups
    mlflow.log_metrics(
        {
            **evaluation.comparison.metrics(),
            **groups[ALL_PEAKS].metrics("member_check_"),
            **{f"member_check_seed_{t.seed}_best_epoch": t.best_epoch for t in check.trainings},
            **{f"member_check_seed_{t.seed}_auc": t.best_val_auc for t in check.trainings},
            "member_check_rows": check.rows.height,
            "train_rows": transformer[0].train_rows,
        }
    )
    mlflow.log_text(evaluation.comparison.markdown(), "evaluation/comparison.md")
    mlflow.log_text(
        f"Member check: the member rows of {', '.join(map(str, check.years))}, answered by the "
        "recipe trained on the years before them.\n\n"
        + "\n".join(table.markdown() for table in groups.values()),
        "evaluation/member_groups.md",
    )
    if evaluation.tree_lead is not None:
        lead = evaluation.tree_lead
        mlflow.log_metrics(
            {
                "member_check_auc_best_tree": lead.tree_auc,
                **lead.difference.as_dict("member_check_auc_transformer_minus_best_tree"),
            }
        )
        mlflow.log_metric("served_transformer_weight", lead.weight)
        mlflow.set_tags({"member_check_best_tree": lead.tree, "served_model": lead.served})
    if evaluation.expeditions is not None:
        mlflow.log_metrics(evaluation.expeditions.metrics("test_expeditions_"))
        mlflow.log_text(evaluation.expeditions.markdown(), "evaluation/expeditions.md")


def held_out_expeditions(
    backtest: BacktestConfig, test_rows: pl.DataFrame, served: dict[str, np.ndarray]
) -> ExpeditionTable | None:
    """The test split's expedition records judged by expedition (deepsummit/train/
    expeditions.py): their members share one P, so ranking members within them says nothing.
    None when the test split has none."""
    is_record = (test_rows["record"] == "expedition").to_numpy()
    if not is_record.any():
        return None
    rows = test_rows.filter(pl.Series(is_record)).select("expid", "year", "season", "label")
    return expedition_table(
        rows.with_columns(
            **{name: pl.Series(values[is_record]) for name, values in served.items()}
        ),
        tuple(served),
        backtest.min_season_expeditions,
        backtest.unscored_seasons,
    )


def seed_spread(
    results: list[TrainResult], held_out: HeldOut, calibrator: Calibrator
) -> SeedSpread:
    """Each seed's validation and test AUC, and the mean width of the band of every member's
    calibrated probability on the test rows (what `predict` shows as the band)."""
    test = held_out.arrays
    ones = np.ones((1, len(test)))
    inputs = test.model_inputs()
    per_seed = [ensemble_probability(member_logits([r.model], inputs)) for r in results]
    logits = member_logits([r.model for r in results], inputs)
    members = calibrator.probabilities(logits, held_out.rows)
    return SeedSpread(
        tuple(r.seed for r in results),
        tuple(r.best_val_auc for r in results),
        tuple(float(weighted_auc(test.label, p, ones)[0]) for p in per_seed),
        float((members.max(0) - members.min(0)).mean()),
    )


def _group_aucs(test_rows: pl.DataFrame, labels: np.ndarray, probabilities: np.ndarray) -> None:
    groups = {}
    for column in ("peakid", "season"):
        aucs = auc_by_group(labels, probabilities, test_rows[column].fill_null("unknown"))
        groups[column] = {k: (None if np.isnan(v) else v) for k, v in aucs.items()}
        mlflow.log_metrics(
            {f"test_auc_{column}_{k}": v for k, v in aucs.items() if not np.isnan(v)}
        )
    mlflow.log_dict(groups, "evaluation/auc_by_group.json")


def _log_plots(
    directory: Path,
    labels: np.ndarray,
    models: list[ModelPredictions],
    served: dict[str, np.ndarray],
    first: TrainResult,
) -> None:
    """ROC, reliability before and after the map, and the first seed's learning curve."""
    log_plots(
        directory,
        [
            plot_roc(labels, served, directory / "roc.png"),
            plot_calibration(
                labels,
                {m.name: m.test for m in models},
                directory / "calibration_before.png",
                "before the map",
            ),
            plot_calibration(labels, served, directory / "calibration.png", "as served"),
        ],
        first.history,
    )
