"""One trial of the hyperparameter search, on the worker that runs it: trained with the
trial's parameters as an MLflow child run of the search, reporting its validation AUC to the
study after each epoch (the study prunes a trial below the median), and telling the study how
it ended. deepsummit/train/tuning.py holds the search itself.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import mlflow
import optuna
from optuna.trial import FrozenTrial, TrialState

from deepsummit.contracts.champion import set_experiment
from deepsummit.contracts.snapshot import load_features
from deepsummit.core.config import Settings
from deepsummit.core.errors import PipelineError
from deepsummit.train.checkpoint import EpochRecord
from deepsummit.train.tracking import log_epoch
from deepsummit.train.trainer import EpochCallback, TrainResult, train_model
from deepsummit.train.tuning import (
    SECTIONS,
    TAG_ROLE,
    TAG_STUDY,
    TAG_TRIAL,
    TrialOutcome,
    find_trial,
    open_study,
    trial_handle,
    with_hyperparameters,
)

logger = logging.getLogger(__name__)


def epoch_reporter(settings: Settings, study: optuna.Study, number: int) -> EpochCallback:
    """A trainer callback: validation AUC to the study after each epoch; prunes by raising
    `optuna.TrialPruned` (the trainer stops there, its checkpoint written)."""
    trial = trial_handle(settings, study, number)

    def report(record: EpochRecord) -> None:
        trial.report(record.val_auc, record.epoch)
        if trial.should_prune():
            raise optuna.TrialPruned(
                f"trial {number} pruned after epoch {record.epoch}: validation AUC "
                f"{record.val_auc:.4f} is below the median of earlier trials at that epoch"
            )

    return report


def run_trial(
    settings: Settings,
    features_dir: Path,
    number: int,
    parent_run_id: str,
    tags: dict[str, str],
) -> TrialOutcome:
    """Train trial `number` of the study with its parameters, as an MLflow child run of
    `parent_run_id`; tell the study the best validation AUC (or that it was pruned), inside
    that run."""
    study = open_study(settings)
    trial = _running_trial(study, number)
    trial_settings = with_hyperparameters(settings, trial.params)
    arrays, preprocessor = load_features(features_dir)
    dimensions = preprocessor.model_dimensions()
    report = epoch_reporter(settings, study, number)
    handle = trial_handle(settings, study, number)
    history: list[EpochRecord] = []

    def on_epoch_end(record: EpochRecord) -> None:
        history.append(record)
        log_epoch(record)
        report(record)

    set_experiment(settings.mlflow.tracking_uri, settings.mlflow.experiment)
    run_tags = {**tags, TAG_STUDY: study.study_name, TAG_TRIAL: str(number), TAG_ROLE: "trial"}
    with (
        mlflow.start_run(
            run_name=f"trial-{number}", parent_run_id=parent_run_id, tags=run_tags
        ) as run,
        tempfile.TemporaryDirectory(prefix=f"trial-{number}-") as checkpoints,
    ):
        handle.set_user_attr("mlflow_run_id", run.info.run_id)
        handle.set_user_attr("prefect_flow_run_id", tags.get("prefect.flow_run_id", ""))
        mlflow.log_params({f"{SECTIONS[k]}.{k}": v for k, v in trial.params.items()})
        try:
            result = train_model(
                trial_settings.train,
                trial_settings.model,
                arrays["train"],
                arrays["validation"],
                dimensions,
                Path(checkpoints),
                on_epoch_end,
            )
        except optuna.TrialPruned as pruned:
            return _pruned(study, number, pruned, history, run.info.run_id)
        _tell_complete(study, number, result)
    return TrialOutcome(
        number, "COMPLETE", result.best_val_auc, len(result.history), run.info.run_id
    )


def _running_trial(study: optuna.Study, number: int) -> FrozenTrial:
    """Trial `number` of the study, which must be running (asked, not yet told)."""
    trial = find_trial(study, number)
    if trial.state != TrialState.RUNNING:
        raise PipelineError(
            f"trial {number} of study {study.study_name!r} is {trial.state.name}, not running"
        )
    return trial


def _pruned(
    study: optuna.Study,
    number: int,
    pruned: optuna.TrialPruned,
    history: list[EpochRecord],
    run_id: str,
) -> TrialOutcome:
    """Tell the study and the trial's active run that the trial was pruned."""
    logger.info("%s", pruned)
    study.tell(number, state=TrialState.PRUNED)
    mlflow.set_tags({"trial_state": "pruned", "pruned_reason": str(pruned)})
    return TrialOutcome(number, "PRUNED", history[-1].val_auc, len(history), run_id)


def _tell_complete(study: optuna.Study, number: int, result: TrainResult) -> None:
    """Log the finished training's figures in the trial's active run and tell the study its
    best validation AUC."""
    mlflow.log_metrics(
        {
            "best_val_auc": result.best_val_auc,
            "best_epoch": result.best_epoch,
            "epochs_run": len(result.history),
        }
    )
    study.tell(number, result.best_val_auc)
    mlflow.set_tag("trial_state", "complete")
