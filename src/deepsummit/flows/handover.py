"""What a child flow run on another machine hands back to the flow run that started it.

Prefect keeps a flow run's return value in the result storage of the machine it ran on, which
the parent's machine cannot read. So the child logs its report, as JSON
(deepsummit/contracts/training_report.py), to an MLflow run, through the tracking server, and
leaves where it is and its sha256 as a table artifact of its own flow run on the Prefect server;
the parent reads that artifact, downloads the file, checks the digest and reads the document
against the report's schema. Nothing on this path is unpickled: whoever can write the artifact
can choose the file, so the file must not be able to run anything.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path
from uuid import UUID

from prefect.artifacts import create_table_artifact
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterKey,
    FlowRunFilter,
    FlowRunFilterId,
)
from prefect.runtime import flow_run

from deepsummit.contracts.training_report import Build, TrainingReport
from deepsummit.core.errors import PipelineError
from deepsummit.core.sections import MlflowConfig

HANDOVER_ARTIFACT = "deepsummit-handover"
HANDOVER_DIR = "handover"


def hand_over(config: MlflowConfig, mlflow_run_id: str, report: TrainingReport) -> str:
    """Log `report` to the MLflow run `mlflow_run_id` for the flow run that started this one;
    the URI it is at."""
    return hand_over_document(config, mlflow_run_id, report.to_json())


def hand_over_document(config: MlflowConfig, mlflow_run_id: str, payload: bytes) -> str:
    """Log the JSON document `payload` as `hand_over` does (the parent checks it against the
    schema, whoever wrote it)."""
    from mlflow import MlflowClient

    name = f"{flow_run.get_id()}.json"
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_bytes(payload)
        MlflowClient(config.tracking_uri).log_artifact(mlflow_run_id, str(path), HANDOVER_DIR)
    uri = f"runs:/{mlflow_run_id}/{HANDOVER_DIR}/{name}"
    create_table_artifact(
        key=HANDOVER_ARTIFACT,
        table=[{"uri": uri, "sha256": hashlib.sha256(payload).hexdigest()}],
        description="What this flow run handed back to the run that started it",
    )
    return uri


def handed_over(config: MlflowConfig, child_flow_run_id: UUID, build: Build) -> TrainingReport:
    """The report the child flow run `child_flow_run_id` handed over, checked against its
    digest and the report's schema, and made by this side's `build`."""
    import mlflow

    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[HANDOVER_ARTIFACT])),
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[child_flow_run_id])),
        )
    if not artifacts:
        raise PipelineError(f"flow run {child_flow_run_id} handed nothing over")
    table = artifacts[0].data
    [row] = json.loads(table) if isinstance(table, str) else table
    mlflow.set_tracking_uri(config.tracking_uri)
    with tempfile.TemporaryDirectory() as folder:
        local = Path(mlflow.artifacts.download_artifacts(row["uri"], dst_path=folder))
        payload = local.read_bytes()
    if hashlib.sha256(payload).hexdigest() != row["sha256"]:
        raise PipelineError(
            f"{row['uri']}: not the file flow run {child_flow_run_id} handed over (its sha256 "
            "differs): refused"
        )
    report = TrainingReport.from_json(payload, row["uri"])
    build.refuse_other(report.build, f"training flow run {child_flow_run_id}")
    return report
