"""A child flow run hands its report back through the MLflow and Prefect servers, not through its
machine's result storage, as a JSON document checked against the report's schema: the parent
gets it from them alone, and refuses a file that is not the one handed over, a document that
does not follow the schema and a report of another build, each in one line; the training flow
run refuses to train for a chain of another build."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace
from uuid import UUID

import mlflow
import pytest
from prefect import flow
from prefect.runtime import flow_run
from prefect.settings import temporary_settings
from prefect.states import State
from services_fixtures import RunningServices, prefect_server

from deepsummit.contracts.training_report import Build, LineageRow, TrainingReport
from deepsummit.core.errors import PipelineError
from deepsummit.core.sections import MlflowConfig
from deepsummit.flows.handover import hand_over_document, handed_over
from deepsummit.flows.training import train_stage
from deepsummit.services.local import mlflow_store

pytest_plugins = ["services_fixtures"]


@flow(name="summit-handover-child", persist_result=False)
def child(mlflow_run_id: str, tracking_uri: str, document: bytes) -> str:
    hand_over_document(MlflowConfig(tracking_uri=tracking_uri), mlflow_run_id, document)
    return str(flow_run.get_id())


@flow(name="summit-handover-parent", persist_result=False)
def parent(child_id: UUID, tracking_uri: str, package_version: str, model_spec: str) -> str:
    config = MlflowConfig(tracking_uri=tracking_uri)
    return handed_over(config, child_id, Build(package_version, model_spec)).model_version


def mlflow_config(stack: RunningServices) -> MlflowConfig:
    return stack.settings.mlflow.model_copy(
        update={"tracking_uri": stack.settings.services.mlflow_url}
    )


def a_report(build: Build) -> TrainingReport:
    row = LineageRow("train", "mlflow://deepsummit/7", 2000, "ab12", "Completed", "run")
    return TrainingReport(
        package_version=build.package_version,
        model_spec=build.model_spec,
        mlflow_run_id="r1",
        model_name="deepsummit",
        model_version="7",
        champion=True,
        decision_reason="beats v6",
        weather_source="archive",
        digest="c0ffee",
        inputs=("age", "sex"),
        test_auc=0.78,
        served="transformer 0.50 + CatBoost 0.50",
        judged_line="Judged as served.",
        tables_markdown="| model | AUC |",
        run_url="http://mlflow/r1",
        model_url="http://mlflow/m7",
        lineage=(row,),
    )


def handed(stack: RunningServices, document: bytes) -> tuple[UUID, str]:
    """The child flow run's id and the MLflow run it handed `document` over in."""
    config = mlflow_config(stack)
    mlflow.set_tracking_uri(config.tracking_uri)
    run_id = (
        mlflow.MlflowClient()
        .create_run(mlflow.set_experiment("handover").experiment_id)
        .info.run_id
    )
    with temporary_settings(prefect_server(stack.settings)):
        child_id = child(run_id, config.tracking_uri, document)
    return UUID(child_id), run_id


def read_back(stack: RunningServices, child_id: UUID, build: Build) -> State:
    """The parent flow run's final state, reading what `child_id` handed over as `build`."""
    tracking_uri = mlflow_config(stack).tracking_uri
    with temporary_settings(prefect_server(stack.settings)):
        return parent(
            child_id, tracking_uri, build.package_version, build.model_spec, return_state=True
        )


def failed_line(state: State) -> str:
    """The one line a Failed run ended with."""
    assert state.is_failed(), state
    [line] = (state.message or "").splitlines()
    return line


@pytest.fixture(scope="module")
def build(services_stack: RunningServices) -> Build:
    return Build.of(services_stack.settings)


def test_the_parent_gets_the_report_without_the_childs_result_storage(
    services_stack: RunningServices, build: Build
) -> None:
    report = a_report(build)
    child_id, run_id = handed(services_stack, report.to_json())
    # Nothing the child's machine kept: its result storage is gone.
    shutil.rmtree(services_stack.settings.paths.var_dir / "prefect-results", ignore_errors=True)

    with temporary_settings(prefect_server(services_stack.settings)):
        assert handed_over(mlflow_config(services_stack), child_id, build) == report
    _, artifacts = mlflow_store(services_stack.settings)
    [stored] = artifacts.glob(f"*/{run_id}/artifacts/handover/*")
    assert stored.name == f"{child_id}.json"  # a document, not a pickle


def test_a_handed_over_file_changed_in_the_store_is_refused(
    services_stack: RunningServices, build: Build
) -> None:
    child_id, run_id = handed(services_stack, a_report(build).to_json())
    _, artifacts = mlflow_store(services_stack.settings)
    [stored] = artifacts.glob(f"*/{run_id}/artifacts/handover/{child_id}.json")
    stored.write_bytes(stored.read_bytes().replace(b'"champion":true', b'"champion":false'))

    with (
        temporary_settings(prefect_server(services_stack.settings)),
        pytest.raises(PipelineError, match=r"not the file flow run .* handed over"),
    ):
        handed_over(mlflow_config(services_stack), child_id, build)


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        ({"champion": "yes"}, r"champion: Input should be a valid boolean"),
        ({"py/reduce": "os.system"}, r"py/reduce: Extra inputs are not permitted"),
    ],
)
def test_a_report_that_does_not_follow_the_schema_fails_the_parent_in_one_line(
    services_stack: RunningServices, build: Build, change: dict, refusal: str
) -> None:
    """What whoever can write the artifact could hand over, with its own correct digest."""
    document = json.loads(a_report(build).to_json()) | change
    child_id, _ = handed(services_stack, json.dumps(document).encode())

    line = failed_line(read_back(services_stack, child_id, build))

    assert "does not follow the schema" in line and re.search(refusal, line)


def test_a_report_of_another_package_version_fails_the_parent_in_one_line(
    services_stack: RunningServices, build: Build
) -> None:
    other = replace(build, package_version="0.0.1")
    child_id, _ = handed(services_stack, a_report(other).to_json())

    line = failed_line(read_back(services_stack, child_id, build))

    assert f"runs deepsummit package version '0.0.1', this side '{build.package_version}'" in line


def test_the_training_refuses_a_chain_of_another_model_spec_before_it_fetches_anything(
    services_stack: RunningServices, build: Build
) -> None:
    with temporary_settings(prefect_server(services_stack.settings)):
        state = train_stage(
            "runs:/nowhere/features",
            "0" * 64,
            build.package_version,
            "another-spec",
            return_state=True,
        )

    line = failed_line(state)

    assert "the chain that started it runs deepsummit model spec 'another-spec'" in line
    assert "nowhere" not in line  # refused before the snapshot was asked for
