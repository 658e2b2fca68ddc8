"""What a child flow run on another machine hands back to the flow run that started it.

Prefect keeps a flow run's return value in the result storage of the machine it ran on, which
the parent's machine cannot read. So the child logs the value (pickled) to an MLflow run, through
the tracking server, and leaves where it is and its sha256 as a table artifact of its own flow
run on the Prefect server; the parent reads that artifact, downloads the file and checks the
digest before it unpickles anything (a file that is not the one handed over is code it would run).
"""

from __future__ import annotations

import hashlib
import json
import pickle
import tempfile
from pathlib import Path
from typing import Any
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

from deepsummit.core.errors import PipelineError
from deepsummit.core.sections import MlflowConfig

HANDOVER_ARTIFACT = "deepsummit-handover"
HANDOVER_DIR = "handover"


def hand_over(config: MlflowConfig, mlflow_run_id: str, value: Any) -> str:
    """Log `value` to the MLflow run `mlflow_run_id` for the flow run that started this one;
    the URI it is at."""
    from mlflow import MlflowClient

    payload = pickle.dumps(value)
    name = f"{flow_run.get_id()}.pkl"
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


def handed_over(config: MlflowConfig, child_flow_run_id: UUID) -> Any:
    """The value the child flow run `child_flow_run_id` handed over, checked against its
    digest."""
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
    return pickle.loads(payload)
