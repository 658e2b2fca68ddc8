"""The worker `deepsummit up` starts refuses, before any of the run executes, a run whose job
variables fall outside its pool's template, which Prefect 3.8.8 lets through when a deployment
is updated without naming its pool and the scheduler creates the run; and a run whose
DEEPSUMMIT_* variables point it elsewhere. The run ends Failed with the reason in one line, and
its payload (a probe flow that leaves a mark, tests/training_probes.py) never ran. What it does
run inherits only the allow-listed part of the worker's environment."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest
from prefect.client.orchestration import SyncPrefectClient, get_client
from prefect.client.schemas.actions import DeploymentUpdate
from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId
from prefect.client.schemas.objects import FlowRun, WorkPool
from prefect.client.schemas.schedules import IntervalSchedule
from prefect.settings import temporary_settings
from remote_worker import wait_final
from services_fixtures import RunningServices, prefect_server

from deepsummit.core.sections import PROJECT_ROOT
from deepsummit.services.checked_worker import inherited, refusal, shipped_template

pytest_plugins = ["services_fixtures"]

IN_CHECKOUT = {"prefect.deployments.steps.set_working_directory": {"directory": str(PROJECT_ROOT)}}
SCHEDULED_TIMEOUT_S = 120.0
# The server's scheduler looks at a deployment changed within about 5 s (Prefect's
# recent_deployments_loop_seconds), and creates the runs due after it looks.
FIRST_RUN_IN_S = 20.0


@pytest.fixture(scope="module")
def client(services_stack: RunningServices) -> Iterator[SyncPrefectClient]:
    with (
        temporary_settings(prefect_server(services_stack.settings)),
        get_client(sync_client=True) as client,
    ):
        yield client


def deploy(client: SyncPrefectClient, pool: str, marker: Path) -> UUID:
    """A deployment of the marking probe on `pool`, run from the checkout."""
    return client.create_deployment(
        flow_id=client.create_flow_from_name("probe-marks"),
        name=f"marks-{uuid4().hex[:8]}",
        work_pool_name=pool,
        entrypoint="tests/training_probes.py:marks",
        pull_steps=[IN_CHECKOUT],
        parameters={"marker": str(marker)},
    )


def scheduled_run(client: SyncPrefectClient, deployment_id: UUID) -> FlowRun:
    """The run the server's scheduler creates for `deployment_id` once given a daily schedule
    whose first run is due shortly (the scheduler creates runs due from when it looks)."""
    first = datetime.now(UTC) + timedelta(seconds=FIRST_RUN_IN_S)
    schedule = IntervalSchedule(interval=timedelta(days=1), anchor_date=first)
    client.create_deployment_schedules(deployment_id, [(schedule, True)])
    wanted = DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id]))
    deadline = time.monotonic() + SCHEDULED_TIMEOUT_S
    while not (runs := client.read_flow_runs(deployment_filter=wanted)):
        assert time.monotonic() < deadline, "the scheduler created no run"
        time.sleep(0.5)
    [run] = [run for run in runs if run.expected_start_time == first]
    return run


def refused_line(run: FlowRun) -> str:
    assert run.state is not None and run.state.is_failed(), run.state
    [line] = (run.state.message or "").splitlines()
    assert line.startswith("refused by worker ")
    return line


def test_a_run_within_the_template_runs_with_an_allow_listed_environment(
    client: SyncPrefectClient, services_stack: RunningServices, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    deployment_id = deploy(client, services_stack.settings.services.work_pool, marker)
    env = {"env": {"DEEPSUMMIT_TRAIN__MAX_EPOCHS": "1"}}
    run = client.create_flow_run_from_deployment(deployment_id, job_variables=env)

    assert wait_final(client, run.id).state.is_completed()
    names = marker.read_text().split()
    assert "DEEPSUMMIT_TRAIN__MAX_EPOCHS" in names
    assert [name for name in names if not inherited(name)] == []


def test_a_tampered_deployment_the_scheduler_runs_fails_in_one_line_its_payload_unrun(
    client: SyncPrefectClient, services_stack: RunningServices, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    env = {"LD_PRELOAD": "/tmp/evil.so", "PYTHONSTARTUP": "/tmp/evil.py"}
    deployment_id = deploy(client, services_stack.settings.services.work_pool, marker)
    # Stored unchecked: the update names no work pool (Prefect 3.8.8).
    client.update_deployment(deployment_id, DeploymentUpdate(job_variables={"env": env}))
    assert client.read_deployment(deployment_id).job_variables == {"env": env}

    run = wait_final(client, scheduled_run(client, deployment_id).id)

    line = refused_line(run)
    assert "job variables outside process-job-template.json" in line
    assert "'LD_PRELOAD' does not match" in line or "'PYTHONSTARTUP' does not match" in line
    assert not marker.exists()
    client.delete_deployment(deployment_id)


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("DEEPSUMMIT_MLFLOW__TRACKING_URI", "http://elsewhere:5000", "mlflow.tracking_uri"),
        ("DEEPSUMMIT_SERVICES__PREFECT_PORT", "4444", "services.prefect_port"),
        ("DEEPSUMMIT_PATHS__DATA_DIR", "/tmp/elsewhere", "paths.data_dir"),
        ("DEEPSUMMIT_PROJECT_DIR", "/tmp/elsewhere", "DEEPSUMMIT_PROJECT_DIR is the worker's"),
    ],
)
def test_a_run_pointed_at_another_server_or_folder_fails_in_one_line_its_payload_unrun(
    client: SyncPrefectClient,
    services_stack: RunningServices,
    tmp_path: Path,
    variable: str,
    value: str,
    said: str,
) -> None:
    """Within the template (DEEPSUMMIT_* names), so the server takes the run; the worker does
    not."""
    marker = tmp_path / "ran"
    deployment_id = deploy(client, services_stack.settings.services.work_pool, marker)
    env = {"env": {variable: value}}
    run = client.create_flow_run_from_deployment(deployment_id, job_variables=env)

    assert said in refused_line(wait_final(client, run.id))
    assert not marker.exists()


def _pool(template: dict[str, Any]) -> WorkPool:
    return WorkPool(name="local", type="process", base_job_template=template)


def test_a_pool_whose_template_was_changed_is_refused_whatever_the_run_asks() -> None:
    template = shipped_template()
    assert refusal(_pool(template), {}) is None
    opened = json.loads(json.dumps(template))
    opened["variables"]["properties"]["command"] = {"type": "string"}
    opened["job_configuration"]["command"] = "{{ command }}"

    reason = refusal(_pool(opened), {})

    assert reason is not None and reason.startswith("work pool 'local' has another base job")
