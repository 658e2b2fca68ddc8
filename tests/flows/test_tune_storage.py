"""summit/tune on the local services (a real Prefect server, its worker and the deployments): the
study's URL, which may hold a password, reaches the search and every trial from a Prefect Secret
block, and no flow run's parameters hold it; a URL with a password given as a parameter ends the
search before any trial's flow run is made."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from flows_fixtures import TINY_SPACE, write_bundle_slice
from optuna.trial import TrialState
from prefect.blocks.system import Secret
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import FlowRun
from prefect.deployments import run_deployment
from prefect.settings import temporary_settings
from services_fixtures import RunningServices, prefect_server

from deepsummit.core.config import deep_merge, load_settings
from deepsummit.train import tuning

pytest_plugins = ["services_fixtures"]
pytestmark = pytest.mark.timeout(900)


def _search(stack: RunningServices, root: Path, options: dict[str, Any]) -> FlowRun:
    """`summit/tune` on the services' worker with a two-trial tiny search; its flow run."""
    overrides = deep_merge(
        stack.overrides,
        {
            "paths": {"data_dir": str(write_bundle_slice(root / "data"))},
            "mlflow": {"tracking_uri": stack.settings.services.mlflow_url},
            "train": {"num_threads": 1, "seeds": 1},
            "tune": {"study_name": root.name, "search_space": TINY_SPACE, "poll_interval_s": 1.0},
        },
    )
    parameters = {
        "profile": "tiny",
        "options": {"n_trials": 2, "concurrency": 2, **options},
        "overrides": overrides,
    }
    with temporary_settings(prefect_server(stack.settings)):
        return run_deployment("summit/tune", parameters=parameters, timeout=800, poll_interval=2)


def _parameters_of_every_flow_run(stack: RunningServices) -> dict[str, str]:
    with temporary_settings(prefect_server(stack.settings)), get_client(sync_client=True) as client:
        return {run.name: json.dumps(run.parameters) for run in client.read_flow_runs()}


def test_the_study_url_reaches_every_trial_from_a_secret_block_and_no_run_parameter(
    services_stack: RunningServices, tmp_path: Path
) -> None:
    # SQLite takes no password: a random folder name stands for one (it is as secret here).
    password = uuid4().hex
    url = f"sqlite:///{tmp_path / password / 'optuna.db'}"
    (tmp_path / password).mkdir()
    block = f"study-{tmp_path.name}".replace("_", "-").lower()
    with temporary_settings(prefect_server(services_stack.settings)):
        Secret(value=url).save(block, overwrite=True)

    search = _search(services_stack, tmp_path, {"storage_secret": block})

    # The search and its trials found the study through the block: both trials told it their
    # result there.
    settings = load_settings("tiny", {"tune": {"storage_url": url, "study_name": tmp_path.name}})
    study = tuning.open_study(settings)
    states = [t.state for t in study.trials]
    assert states == [TrialState.COMPLETE] * 2, tuning.trials_markdown(study)
    assert search.state.is_completed(), search.state.message
    parameters = _parameters_of_every_flow_run(services_stack)
    trials = [name for name in parameters if name.startswith(f"{tmp_path.name}-trial-")]
    assert len(trials) == 2, sorted(parameters)
    leaked = [name for name, values in parameters.items() if password in values]
    assert leaked == [], f"flow runs whose parameters hold the study URL: {leaked}"


def test_a_study_url_with_a_password_as_a_parameter_ends_the_search_before_any_trial(
    services_stack: RunningServices, tmp_path: Path
) -> None:
    url = f"postgresql://optuna:{uuid4().hex}@127.0.0.1:1/optuna"
    search = _search(services_stack, tmp_path, {"storage_url": url})
    assert search.state.is_failed()
    assert "tune.storage_secret" in search.state.message
    parameters = _parameters_of_every_flow_run(services_stack)
    assert not [name for name in parameters if name.startswith(f"{tmp_path.name}-trial-")]
