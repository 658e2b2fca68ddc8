"""`prefect deployment run summit/tune` through a real local Prefect server, MLflow server and
TWO process workers, on a two-peak slice with a tiny search space: the trials run as separate
flow runs of summit-trial/trial, one of them is killed mid-run (SIGKILL to its flow-run process)
and the search goes on, the study records every trial, MLflow holds the search run with its
children, the best configuration is registered behind the champion gate and saved as the tuned
profile; a rerun with a larger budget resumes the same study. The study's URL comes from a Prefect
Secret block: no flow run's parameters hold it, nor any byte the run stored (the Prefect database
and result storage, the logs, the MLflow database and artifacts, the data folder var/). Every
process is stopped by PID."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from flows_fixtures import TINY_SPACE, isolated_paths, write_bundle_slice
from mlflow import MlflowClient
from optuna.trial import TrialState
from prefect.blocks.system import Secret
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    DeploymentFilter,
    DeploymentFilterName,
    FlowRunFilter,
    FlowRunFilterParentFlowRunId,
)
from prefect.client.schemas.objects import FlowRun
from prefect.settings import temporary_settings
from secret_scan import find_secret
from services_fixtures import STARTUP_TIMEOUT_S, free_port, prefect_server

from deepsummit.core.config import Settings, deep_merge, load_settings
from deepsummit.core.sections import PROJECT_ROOT
from deepsummit.services import supervisor as services
from deepsummit.train import tuning

pytestmark = [pytest.mark.e2e, pytest.mark.long, pytest.mark.timeout(1200)]

SECOND_WORKER = "worker-2"
STUDY_SECRET = "e2e-study"
PREFECT = str(Path(sys.executable).parent / "prefect")


def _prefect(settings: Settings, *args: str) -> str:
    result = subprocess.run(
        [PREFECT, *args],
        cwd=PROJECT_ROOT,
        env={**os.environ, **services.worker_env(settings)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def _online_workers(settings: Settings) -> set[str]:
    with temporary_settings(prefect_server(settings)), get_client(sync_client=True) as client:
        workers = client.read_workers_for_work_pool(settings.services.work_pool)
    return {w.name for w in workers if w.status == "ONLINE"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Settings, dict[str, Any]]]:
    root = tmp_path_factory.mktemp("tune")
    overrides = isolated_paths(root)
    overrides["paths"]["data_dir"] = str(write_bundle_slice(root / "data"))
    overrides["services"] |= {"prefect_port": free_port(), "mlflow_port": free_port()}
    overrides["train"]["num_threads"] = 1
    # A trial trains one seed; so does the final run here, so that it reproduces the trial's
    # validation AUC exactly (with more, it registers the best of its seeds).
    overrides["train"]["seeds"] = 1
    # Trials long enough to run side by side for a while: the kill below waits for two at once
    # (a tiny-profile trial of 2 epochs on 2,000 rows is over in about a second).
    overrides["train"] |= {"max_epochs": 10, "patience": 10, "max_train_rows": None}
    overrides["tune"] = {"study_name": "e2e", "search_space": TINY_SPACE, "poll_interval_s": 1.0}
    # The runs find the study through a Secret block, never a parameter. SQLite takes no
    # password: a random folder name in its URL stands for one (it is as secret here).
    password = uuid4().hex
    (root / password).mkdir()
    study_url = f"sqlite:///{root / password / 'optuna.db'}"
    settings = load_settings("tiny", deep_merge(overrides, {"tune": {"storage_url": study_url}}))
    try:
        # servers, the local pool, every local deployment, one worker
        services.up(settings, STARTUP_TIMEOUT_S)
        with temporary_settings(prefect_server(settings)):
            Secret(value=study_url).save(STUDY_SECRET, overwrite=True)
        command = [
            sys.executable, "-m", "deepsummit.services.checked_worker",
            "--pool", settings.services.work_pool, "--name", f"{services.WORKER_NAME}-2",
        ]  # fmt: skip
        services.start_process(settings, SECOND_WORKER, command, services.worker_env(settings))
        deadline = time.monotonic() + 120
        while len(_online_workers(settings)) < 2:
            assert time.monotonic() < deadline, "the second worker never came online"
            time.sleep(1)
        yield settings, overrides, password
    finally:
        services.stop_process(settings, SECOND_WORKER)
        services.down(settings)
    for name in (*services.SERVICE_NAMES, SECOND_WORKER):
        assert services.recorded_pid(settings, name) is None


def _run_tune(settings: Settings, overrides: dict[str, Any], n_trials: int) -> str:
    """`prefect deployment run summit/tune` with small parameters; the flow run id."""
    options = {"n_trials": n_trials, "concurrency": 2, "storage_secret": STUDY_SECRET}
    params = {"profile": "tiny", "options": options, "overrides": overrides}
    out = _prefect(settings, "deployment", "run", "summit/tune", "--params", json.dumps(params))
    return re.search(r"UUID: ([0-9a-f-]{36})", out).group(1)


def _trial_runs(client: Any, parent_id: str) -> list[FlowRun]:
    return client.read_flow_runs(
        flow_run_filter=FlowRunFilter(
            parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[parent_id])
        ),
        deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=["trial"])),
    )


def _wait(settings: Settings, flow_run_id: str, kill_one: bool) -> tuple[FlowRun, str | None]:
    """Wait for the tune flow run; with `kill_one`, SIGKILL a trial once two trials are seen
    running at the same time, so the kill also witnesses that trials run side by side."""
    killed = None
    deadline = time.monotonic() + 900
    with temporary_settings(prefect_server(settings)), get_client(sync_client=True) as client:
        while time.monotonic() < deadline:
            run = client.read_flow_run(flow_run_id)
            if run.state and run.state.is_final():
                return run, killed
            if kill_one and killed is None:
                running = [
                    trial
                    for trial in _trial_runs(client, flow_run_id)
                    if trial.state and trial.state.is_running() and trial.infrastructure_pid
                ]
                if len(running) >= 2:
                    os.kill(int(running[0].infrastructure_pid), signal.SIGKILL)
                    killed = str(running[0].id)
            # Asked often only while two trials may overlap: each question costs the server.
            time.sleep(0.2 if kill_one and killed is None else 1.0)
    raise AssertionError(f"summit/tune flow run {flow_run_id} not finished in 15 minutes")


def test_a_search_across_two_workers_survives_a_killed_trial_and_resumes(stack):
    settings, overrides, password = stack
    tune_id = _run_tune(settings, overrides, n_trials=3)
    tune_run, killed = _wait(settings, tune_id, kill_one=True)
    assert tune_run.state.is_completed(), tune_run.state.message
    assert killed is not None, "two trials were never seen running at once"

    # Trials ran as their own flow runs, under the search, two at a time; the killed one crashed.
    with temporary_settings(prefect_server(settings)), get_client(sync_client=True) as client:
        trials = {str(t.id): t for t in _trial_runs(client, tune_id)}
    assert len(trials) == 3
    assert trials[killed].state.name == "Crashed"
    assert sorted(t.state.name for t in trials.values()) == ["Completed", "Completed", "Crashed"]
    with temporary_settings(prefect_server(settings)), get_client(sync_client=True) as client:
        parameters = {run.name: json.dumps(run.parameters) for run in client.read_flow_runs()}
    leaked = [name for name, values in parameters.items() if password in values]
    assert leaked == [], f"flow runs whose parameters hold the study URL: {leaked}"
    spans = sorted((t.start_time, t.end_time) for t in trials.values() if t.start_time)
    assert any(later[0] < earlier[1] for earlier, later in itertools.pairwise(spans)), spans

    # The study holds all three; the killed trial is failed with the reason, the search went on.
    study = tuning.open_study(settings)
    states = {t.number: t.state for t in study.trials}
    assert sorted(s.name for s in states.values()) == ["COMPLETE", "COMPLETE", "FAIL"]
    failed = next(t for t in study.trials if t.state == TrialState.FAIL)
    assert "Crashed" in failed.user_attrs[tuning.ATTR_FAILURE]
    assert trials[killed].name == f"e2e-trial-{failed.number}"
    best = study.best_trial

    # MLflow: the search run FINISHED, the completed trials and the final training its children.
    client = MlflowClient(settings.services.mlflow_url)
    parent = client.get_run(study.user_attrs[tuning.ATTR_PARENT_RUN])
    assert parent.info.status == "FINISHED"
    assert parent.data.metrics["trials_complete"] == 2
    assert parent.data.metrics["trials_fail"] == 1
    experiment = client.get_experiment_by_name(settings.mlflow.experiment)
    children = client.search_runs(
        [experiment.experiment_id],
        filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'",
    )
    roles = {}
    for child in children:
        roles.setdefault(child.data.tags[tuning.TAG_ROLE], []).append(child)
    completed = {t.user_attrs["mlflow_run_id"] for t in study.trials if t.state.is_finished()
                 and t.state != TrialState.FAIL}  # fmt: skip
    assert completed <= {r.info.run_id for r in roles["trial"]}
    [final] = roles["final"]
    # The final training is the best trial's configuration, through summit/train's recipe and
    # gate: judged on its member check, and the first model of this registry becomes champion.
    assert final.data.params["model.hidden_size"] == str(best.params["hidden_size"])
    assert 0.0 <= final.data.metrics[f"member_check_seed_{settings.train.seed}_auc"] <= 1.0
    version = client.get_model_version_by_alias(
        settings.mlflow.registered_model, settings.mlflow.champion_alias
    )
    assert version.version == final.data.tags["model_version"]
    assert final.data.tags["champion_decision"] == "promoted"
    assert parent.data.tags["model_version"] == version.version
    assert parent.data.tags["tune.best_trial"] == str(best.number)

    tuned = load_settings("tuned", overrides)
    assert tuned.model.hidden_size == best.params["hidden_size"]
    assert tuned.train.learning_rate == pytest.approx(best.params["learning_rate"])

    # A rerun with a budget of 4 resumes the same study: one new trial, the same search run.
    rerun, _ = _wait(settings, _run_tune(settings, overrides, n_trials=4), kill_one=False)
    assert rerun.state.is_completed(), rerun.state.message
    study = tuning.open_study(settings)
    assert len(study.trials) == 4
    assert {t.number: t.state for t in study.trials[:3]} == states
    assert study.user_attrs[tuning.ATTR_PARENT_RUN] == parent.info.run_id
    reopened = client.get_run(parent.info.run_id)
    assert reopened.info.status == "FINISHED"
    assert reopened.data.metrics["trials_complete"] + reopened.data.metrics["trials_pruned"] == 3
    # The best configuration is registered once: an unchanged best is not trained again.
    versions = client.search_model_versions(f"name = '{settings.mlflow.registered_model}'")
    if study.best_trial.number == best.number:
        assert [v.version for v in versions] == [version.version]
        assert reopened.data.tags["model_version"] == version.version
        with temporary_settings(prefect_server(settings)), get_client(sync_client=True) as c:
            names = [run.name for run in c.read_flow_runs()]
        assert names.count(f"{settings.tune.study_name}-best") == 1, names
    else:  # a better trial: registered too, and gated against the first
        assert len(versions) == 2

    # After both searches, every byte the run stored: var/ holds the MLflow database and its
    # artifacts, the Prefect result storage and the tuned profile; the services' folder the
    # Prefect database (SQLite here) and every process's log. The study itself lies apart.
    stored = [settings.paths.var_dir, settings.services.run_dir]
    assert all(folder.is_dir() for folder in stored), stored
    hits = find_secret(stored, password)
    assert hits == [], f"the study's password is stored in: {', '.join(map(str, hits))}"
