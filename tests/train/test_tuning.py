"""deepsummit/train/tuning.py against real SQLite studies and a real MLflow SQLite store: the search
space, resuming a study, the pruning callback, one trial end to end, settling failed trials and
the tuned profile that load_settings reads back."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import mlflow
import optuna
import pytest
from mlflow import MlflowClient
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState

from deepsummit.core import sections
from deepsummit.core.config import Settings, load_settings
from deepsummit.core.errors import PipelineError
from deepsummit.train import trial as trials
from deepsummit.train import tuning
from deepsummit.train.checkpoint import EpochRecord

TINY_SPACE = {"hidden_size": [16, 32], "num_layers": [1], "num_heads": [2], "batch_size": [64]}


pytest_plugins = ["features_fixtures"]


def _settings(tmp_path: Path, **tune: object) -> Settings:
    return load_settings(
        "tiny",
        overrides={
            "paths": {"var_dir": str(tmp_path / "var")},
            "tune": {
                "storage_url": f"sqlite:///{tmp_path / 'optuna.db'}",
                "study_name": "test",
                "search_space": TINY_SPACE,
                **tune,
            },
            "mlflow": {"tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"},
            "train": {"num_threads": 1, "max_epochs": 2, "max_train_rows": 400},
        },
    )


def _record(epoch: int, auc: float) -> EpochRecord:
    return EpochRecord(epoch, 0.5, 0.5, auc, 1e-3, 0.1)


def test_the_default_space_is_the_spec_s():
    space = tuning.search_space(load_settings().tune)
    assert space["hidden_size"] == CategoricalDistribution((128, 256, 512))
    assert space["num_layers"] == CategoricalDistribution((4, 6, 8))
    assert space["num_heads"] == CategoricalDistribution((4, 8))
    assert space["dropout"] == space["drop_path_rate"] == CategoricalDistribution((0.1, 0.2))
    assert space["learning_rate"] == FloatDistribution(1e-5, 1e-3, log=True)
    assert space["weight_decay"] == CategoricalDistribution((0.01, 0.05, 0.1))
    assert space["batch_size"] == CategoricalDistribution((128, 256, 512))


def test_config_narrows_the_space_and_bad_narrowing_is_one_clear_error(tmp_path: Path):
    space = tuning.search_space(
        _settings(tmp_path, search_space={**TINY_SPACE, "learning_rate": [1e-4, 1e-3]}).tune
    )
    assert space["hidden_size"].choices == (16, 32)
    assert space["learning_rate"] == FloatDistribution(1e-4, 1e-3, log=True)
    assert space["weight_decay"] == tuning.SPEC_SPACE["weight_decay"]  # untouched
    for bad, words in (
        ({"width": [1]}, "unknown hyperparameter 'width'"),
        ({"learning_rate": [1e-3]}, "want [low, high]"),
        ({"hidden_size": [30], "num_heads": [4]}, "30 is not divisible by num_heads 4"),
    ):
        with pytest.raises(PipelineError, match=words.replace("[", r"\[").replace("]", r"\]")):
            tuning.search_space(_settings(tmp_path, search_space=bad).tune)


def test_a_relative_sqlite_storage_is_under_the_project_root(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(sections, "PROJECT_ROOT", tmp_path)  # its folder is made, not in ours
    url = tuning.storage_url(
        load_settings(overrides={"tune": {"storage_url": "sqlite:///x/o.db"}}).tune
    )
    assert url == f"sqlite:///{tmp_path / 'x/o.db'}" and (tmp_path / "x").is_dir()
    pg = "postgresql://optuna:secret@db:5432/optuna"
    config = load_settings(overrides={"tune": {"storage_url": pg}}).tune
    assert tuning.storage_url(config) == pg
    assert tuning.storage_description(config) == "postgresql://optuna:***@db:5432/optuna"
    from_secret = config.model_copy(update={"storage_secret": "tune-storage"})
    assert tuning.storage_description(from_secret) == "Prefect Secret 'tune-storage'"


def test_reopening_the_study_resumes_it(tmp_path: Path):
    settings = _settings(tmp_path, n_trials=4)
    study = tuning.open_study(settings)
    space = tuning.search_space(settings.tune)
    first = study.ask(space)
    study.tell(first, 0.7)
    left_running = study.ask(space).number
    uid = tuning.study_uid(study)

    again = tuning.open_study(settings)  # a rerun: the same study, not a new one
    assert tuning.study_uid(again) == uid
    assert [t.state for t in again.trials] == [TrialState.COMPLETE, TrialState.RUNNING]
    assert tuning.running_trials(again) == [left_running]
    assert tuning.trials_to_ask(again, 4) == 2  # 4 wanted, one done, one to resume
    assert again.ask(space).number == 2  # numbering goes on


def test_the_epoch_callback_reports_and_prunes_a_trial_below_the_median(tmp_path: Path):
    settings = _settings(tmp_path, pruner_startup_trials=2, pruner_warmup_epochs=0)
    study = tuning.open_study(settings)
    space = tuning.search_space(settings.tune)
    for auc in (0.80, 0.82):
        trial = study.ask(space)
        for epoch in (1, 2):
            trial.report(auc, epoch)
        study.tell(trial, auc)

    good = study.ask(space).number
    trials.epoch_reporter(settings, tuning.open_study(settings), good)(_record(1, 0.9))
    bad = study.ask(space).number
    with pytest.raises(optuna.TrialPruned, match=f"trial {bad} pruned after epoch 1"):
        trials.epoch_reporter(settings, tuning.open_study(settings), bad)(_record(1, 0.6))
    assert tuning.find_trial(study, good).intermediate_values == {1: 0.9}
    assert tuning.find_trial(study, bad).intermediate_values == {1: 0.6}


def _report_in_another_process(settings: Settings, number: int) -> None:
    trials.epoch_reporter(settings, tuning.open_study(settings), number)(_record(3, 0.75))


def test_a_trial_in_another_process_reports_through_the_storage(tmp_path: Path):
    settings = _settings(tmp_path)
    study = tuning.open_study(settings)
    number = study.ask(tuning.search_space(settings.tune)).number
    process = multiprocessing.get_context("spawn").Process(
        target=_report_in_another_process, args=(settings, number)
    )
    process.start()
    process.join(60)
    assert process.exitcode == 0
    assert tuning.find_trial(study, number).intermediate_values == {3: 0.75}


def test_settling_fails_a_trial_left_running_and_keeps_a_told_one(tmp_path: Path):
    settings = _settings(tmp_path)
    study = tuning.open_study(settings)
    space = tuning.search_space(settings.tune)
    told, crashed = study.ask(space), study.ask(space)
    study.tell(told, 0.66)
    done = tuning.settle_trial(settings, study, told.number, "flow run x Crashed: killed")
    assert (done.state, done.value) == (TrialState.COMPLETE, 0.66)
    failed = tuning.settle_trial(settings, study, crashed.number, "flow run y Crashed: killed")
    assert failed.state == TrialState.FAIL
    assert failed.user_attrs[tuning.ATTR_FAILURE] == "flow run y Crashed: killed"
    assert tuning.best_trial(study).number == told.number


def test_no_completed_trial_is_one_clear_error(tmp_path: Path):
    settings = _settings(tmp_path)
    study = tuning.open_study(settings)
    tuning.settle_trial(settings, study, study.ask(tuning.search_space(settings.tune)).number, None)
    with pytest.raises(PipelineError, match=r"no trial completed .*1 fail"):
        tuning.best_trial(study)


def test_a_trial_trains_as_a_child_run_and_tells_the_study(tmp_path: Path, bundle_features):
    settings = _settings(tmp_path)
    features_dir = bundle_features[1].directory  # the bundle's snapshot (tiny: 2,000 rows)
    study = tuning.open_study(settings)
    parent = tuning.open_parent_run(settings, study, {"origin": "test"})
    number = study.ask(tuning.search_space(settings.tune)).number

    tags = {"prefect.flow_run_id": "f1"}
    outcome = trials.run_trial(settings, features_dir, number, parent, tags)

    trial = tuning.find_trial(study, number)
    assert trial.state == TrialState.COMPLETE and outcome.state == "COMPLETE"
    assert trial.value == pytest.approx(outcome.value)
    assert sorted(trial.intermediate_values) == [1, 2]  # one report per epoch
    assert trial.value == max(trial.intermediate_values.values())  # the best epoch's AUC
    assert trial.user_attrs["mlflow_run_id"] == outcome.mlflow_run_id
    assert trial.user_attrs["prefect_flow_run_id"] == "f1"
    client = MlflowClient(settings.mlflow.tracking_uri)
    child = client.get_run(outcome.mlflow_run_id)
    assert child.data.tags["mlflow.parentRunId"] == parent
    assert child.data.tags[tuning.TAG_TRIAL] == str(number)
    assert child.data.params["model.hidden_size"] == str(trial.params["hidden_size"])
    assert child.data.metrics["best_val_auc"] == pytest.approx(outcome.value)
    assert len(client.get_metric_history(child.info.run_id, "val_auc")) == 2

    with pytest.raises(PipelineError, match=f"trial {number} .* is COMPLETE, not running"):
        trials.run_trial(settings, features_dir, number, parent, {})
    # The parent run is one per study: reopening the study reopens it.
    assert tuning.open_parent_run(settings, tuning.open_study(settings), {}) == parent
    tuning.close_parent_run(settings.mlflow, parent, study, {"model_version": "1"}, failed=False)
    closed = client.get_run(parent)
    assert closed.info.status == "FINISHED"
    assert closed.data.metrics["trials_complete"] == 1
    assert closed.data.tags["tune.best_trial"] == str(number)
    mlflow.set_tracking_uri(None)


def test_a_resumed_search_finds_its_registered_best_and_trains_it_again_once_it_is_gone(
    tmp_path: Path,
):
    """A rerun of summit/tune whose best trial is unchanged starts no final training: the final
    run an earlier run adopted for that trial is found, while its model version exists."""
    settings = _settings(tmp_path)
    config = settings.mlflow
    client = MlflowClient(config.tracking_uri)
    study = tuning.open_study(settings)
    parent = tuning.open_parent_run(settings, study, {})
    experiment = client.get_experiment_by_name(config.experiment).experiment_id
    client.create_registered_model(config.registered_model)
    version = str(client.create_model_version(config.registered_model, str(tmp_path)).version)
    final_tags = {"mlflow.parentRunId": parent, tuning.TAG_ROLE: "final", tuning.TAG_TRIAL: "3"}
    final = client.create_run(
        experiment, tags={**final_tags, "model_version": version, "champion_decision": "promoted"}
    )

    facts = tuning.registered_final_run(config, parent, 3)
    assert facts["final_run_id"] == final.info.run_id
    assert (facts["model_version"], facts["champion_decision"]) == (version, "promoted")
    assert tuning.registered_final_run(config, parent, 4) == {}  # another best: train it
    client.delete_model_version(config.registered_model, version)
    assert tuning.registered_final_run(config, parent, 3) == {}  # its version gone: train again


def test_the_tuned_profile_is_read_back_by_load_settings(tmp_path: Path):
    settings = _settings(tmp_path, profile_name="tuned")
    study = tuning.open_study(settings)
    trial = study.ask(tuning.search_space(settings.tune))
    study.tell(trial, 0.71)
    best = tuning.best_trial(study)

    path = tuning.save_profile(settings, best, study.study_name)

    assert path == tmp_path / "var/profiles/tuned.toml"
    assert "trial 0" in path.read_text()
    tuned = load_settings("tuned", overrides={"paths": {"var_dir": str(tmp_path / "var")}})
    assert tuned.profile == "tuned"
    assert tuned.model.hidden_size == best.params["hidden_size"]
    assert tuned.train.learning_rate == pytest.approx(best.params["learning_rate"])
    assert tuned.train.weight_decay == best.params["weight_decay"]
    assert tuned.train.max_epochs == settings.train.max_epochs  # the rest of the trial's config
    assert tuned.train.max_train_rows == settings.train.max_train_rows
    with pytest.raises(ValueError, match="unknown profile 'tuned'"):
        load_settings("tuned", overrides={"paths": {"var_dir": str(tmp_path / "elsewhere")}})
