"""A child flow run hands its value back through the MLflow and Prefect servers, not through its
machine's result storage: the parent gets it from them alone, and refuses a file that is not the
one handed over."""

from __future__ import annotations

import shutil
from uuid import UUID

import mlflow
import pytest
from prefect import flow
from prefect.runtime import flow_run
from prefect.settings import temporary_settings
from services_fixtures import RunningServices, prefect_server

from deepsummit.core.errors import PipelineError
from deepsummit.core.sections import MlflowConfig
from deepsummit.flows.handover import hand_over, handed_over
from deepsummit.services.local import mlflow_store

pytest_plugins = ["services_fixtures"]


@flow(name="summit-handover-child", persist_result=False)
def child(mlflow_run_id: str, tracking_uri: str, value: dict) -> str:
    hand_over(MlflowConfig(tracking_uri=tracking_uri), mlflow_run_id, value)
    return str(flow_run.get_id())


def mlflow_config(stack: RunningServices) -> MlflowConfig:
    return stack.settings.mlflow.model_copy(
        update={"tracking_uri": stack.settings.services.mlflow_url}
    )


def handed(stack: RunningServices, value: dict) -> tuple[UUID, str]:
    """The child flow run's id and the MLflow run it handed `value` over in."""
    config = mlflow_config(stack)
    mlflow.set_tracking_uri(config.tracking_uri)
    run_id = (
        mlflow.MlflowClient()
        .create_run(mlflow.set_experiment("handover").experiment_id)
        .info.run_id
    )
    with temporary_settings(prefect_server(stack.settings)):
        child_id = child(run_id, config.tracking_uri, value)
    return UUID(child_id), run_id


def test_the_parent_gets_the_value_without_the_childs_result_storage(
    services_stack: RunningServices,
) -> None:
    value = {"model_version": "7", "rows": [1, 2, 3]}
    child_id, _ = handed(services_stack, value)
    # Nothing the child's machine kept: its result storage is gone.
    shutil.rmtree(services_stack.settings.paths.var_dir / "prefect-results", ignore_errors=True)

    with temporary_settings(prefect_server(services_stack.settings)):
        assert handed_over(mlflow_config(services_stack), child_id) == value


def test_a_handed_over_file_changed_in_the_store_is_refused(
    services_stack: RunningServices,
) -> None:
    child_id, run_id = handed(services_stack, {"champion": True})
    _, artifacts = mlflow_store(services_stack.settings)
    [stored] = artifacts.glob(f"*/{run_id}/artifacts/handover/{child_id}.pkl")
    stored.write_bytes(stored.read_bytes().replace(b"\x88", b"\x89"))

    with (
        temporary_settings(prefect_server(services_stack.settings)),
        pytest.raises(PipelineError, match=r"not the file flow run .* handed over"),
    ):
        handed_over(mlflow_config(services_stack), child_id)
