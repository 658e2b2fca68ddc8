"""summit/tune on the local services (a real Prefect server, its worker and the deployments): a
study URL with a password given as a parameter ends the search before any trial's flow run is
made. (That the URL reaches every trial from a Prefect Secret block, and no flow run's parameters
hold it, is pinned by tests/e2e/test_tune.py's search.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from flows_fixtures import TINY_SPACE, write_bundle_slice
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import FlowRun
from prefect.deployments import run_deployment
from prefect.settings import temporary_settings
from services_fixtures import RunningServices, prefect_server

from deepsummit.core.config import deep_merge

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


def test_a_study_url_with_a_password_as_a_parameter_ends_the_search_before_any_trial(
    services_stack: RunningServices, tmp_path: Path
) -> None:
    url = f"postgresql://optuna:{uuid4().hex}@127.0.0.1:1/optuna"
    search = _search(services_stack, tmp_path, {"storage_url": url})
    assert search.state.is_failed()
    assert "tune.storage_secret" in search.state.message
    parameters = _parameters_of_every_flow_run(services_stack)
    assert not [name for name in parameters if name.startswith(f"{tmp_path.name}-trial-")]
