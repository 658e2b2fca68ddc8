"""A training flow run on a worker ends, one way or another: past the deadline for a worker to
start it, or for it to train, the chain cancels it and fails in one line naming which; a run
whose process is killed while its worker lives is started again. A real Prefect server and
worker (`deepsummit up`'s), and real processes standing in for the training
(tests/training_probes.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient
from prefect import flow
from prefect.client.orchestration import SyncPrefectClient, get_client
from prefect.client.schemas.actions import WorkPoolCreate
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId
from prefect.settings import temporary_settings
from prefect.states import State
from remote_worker import wait_final
from services_fixtures import RunningServices, prefect_server

from deepsummit.contracts.training_lease import LEASE_TAG
from deepsummit.core.config import load_settings
from deepsummit.core.sections import PROJECT_ROOT
from deepsummit.flows.training import run_training

pytest_plugins = ["services_fixtures"]

IDLE_POOL = "nobody-polls"
IN_CHECKOUT = {"prefect.deployments.steps.set_working_directory": {"directory": str(PROJECT_ROOT)}}


@flow(name="summit-training-ends", persist_result=False)
def chain_side(
    deployment: str, marker: str, train: dict[str, Any], lease: tuple[str, str] | None
) -> str:
    """What the chain does with its training flow run, under the `train` settings, granting
    the lease on the run of `lease` (tracking URI, run id) where given."""
    tracking = {"mlflow": {"tracking_uri": lease[0]}} if lease else {}
    settings = load_settings("tiny", {"train": train, **tracking})
    run = run_training(deployment, {"marker": marker}, "probe", settings, lease and lease[1])
    return str(run.id)


@pytest.fixture(scope="module")
def client(services_stack: RunningServices) -> Iterator[SyncPrefectClient]:
    """A client of the stack's server, with the probes deployed: on the pool its worker polls,
    and on a pool nobody polls."""
    pool = services_stack.settings.services.work_pool
    with (
        temporary_settings(prefect_server(services_stack.settings)),
        get_client(sync_client=True) as client,
    ):
        client.create_work_pool(WorkPoolCreate(name=IDLE_POOL, type="process"))
        for name, on in (("hang", pool), ("killed_once", pool), ("hang", IDLE_POOL)):
            client.create_deployment(
                flow_id=client.create_flow_from_name(f"probe-{name.replace('_', '-')}"),
                name=on,
                work_pool_name=on,
                entrypoint=f"tests/training_probes.py:{name}",
                pull_steps=[IN_CHECKOUT],
            )
        yield client


def failed_line(state: State) -> str:
    assert state.is_failed(), state
    [line] = (state.message or "").splitlines()
    return line


def ended(
    probe: str, pool: str, marker: Path, lease: tuple[str, str] | None = None, **train: Any
) -> State:
    """The chain side's final state, its training a flow run of `probe` on `pool`."""
    return chain_side(f"probe-{probe}/{pool}", str(marker), train, lease, return_state=True)


def test_a_training_no_worker_picks_up_is_cancelled_and_fails_the_chain_in_one_line(
    client: SyncPrefectClient, tmp_path: Path
) -> None:
    marker = tmp_path / "started"
    state = ended("hang", IDLE_POOL, marker, pickup_deadline_s=3)

    line = failed_line(state)
    assert "was not picked up by a worker of pool 'nobody-polls'" in line
    assert "train.pickup_deadline_s" in line
    [child] = _children(client, state)
    assert child.state is not None and child.state.is_cancelled()
    assert not marker.exists()


def test_a_hung_training_is_stopped_and_fails_the_chain_in_one_line(
    client: SyncPrefectClient, services_stack: RunningServices, tmp_path: Path
) -> None:
    marker = tmp_path / "started"
    state = ended("hang", services_stack.settings.services.work_pool, marker, training_deadline_s=3)

    line = failed_line(state)
    assert "still training after train.training_deadline_s" in line
    assert marker.exists()  # it did start: the worker had it
    [child] = _children(client, state)
    assert wait_final(client, child.id).state.is_cancelled()  # its worker stopped it


def test_a_training_killed_while_its_worker_lives_is_started_again(
    client: SyncPrefectClient, services_stack: RunningServices, tmp_path: Path
) -> None:
    marker = tmp_path / "killed"
    pool = services_stack.settings.services.work_pool
    tracking = MlflowClient(services_stack.settings.services.mlflow_url)
    snapshot_run = tracking.create_run(tracking.create_experiment("training-ends")).info.run_id
    lease = (services_stack.settings.services.mlflow_url, snapshot_run)
    state = ended("killed-once", pool, marker, lease, worker_lost_restarts=1)

    assert state.is_completed(), state
    killed, again = sorted(_children(client, state), key=lambda run: run.expected_start_time)
    assert killed.state is not None and killed.state.is_crashed()
    assert str(again.id) == state.result() and again.name == "probe-2"
    assert marker.exists()
    # The run started again holds the training lease: the killed one is fenced off.
    assert tracking.get_run(snapshot_run).data.tags[LEASE_TAG] == str(again.id)


def _children(client: SyncPrefectClient, parent: State) -> list[Any]:
    """The flow runs the chain side started, as they stand."""
    parent_id = parent.state_details.flow_run_id
    return client.read_flow_runs(
        flow_run_filter=FlowRunFilter(
            parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[parent_id])
        )
    )
