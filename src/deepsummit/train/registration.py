"""Registering a trained model: log it as a pyfunc in the active run, register it marked
`deepsummit.unverified`, record the digest of its files as they are stored and lift the mark. A
registration cut short (MLflow gone after the version was created) leaves the mark, and a marked
version never becomes champion and is never loaded. What the champion gate
(deepsummit/train/registry.py) checks the version against, the model as trained, is returned
with it. Each step waits out a short MLflow outage as the training loop does
(deepsummit/train/tracking.py).
"""

from __future__ import annotations

import importlib.metadata
import tempfile
from dataclasses import dataclass
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
from mlflow import MlflowClient

from deepsummit.contracts.artifact import ARTIFACT_NAME, ModelArtifact, files_digest
from deepsummit.contracts.champion import ARTIFACT_PATH, TAG_FILES_DIGEST, TAG_UNVERIFIED
from deepsummit.contracts.training_lease import Lease
from deepsummit.core.sections import MlflowConfig
from deepsummit.serve.pyfunc import MODEL_CODE_FILE, signature
from deepsummit.serve.scoring import answers
from deepsummit.train.tracking import when_tracking_answers

# The mark a version carries from its creation until its stored files are found to be the ones
# trained.
DIGEST_PENDING = "its files' digest is not recorded yet"


@dataclass(frozen=True)
class TrainedModel:
    """The model as trained, which its registered version must prove to be: the digest of its
    files and its answers to a few test rows asked as a user asks (its input example)."""

    files_digest: str
    request: pd.DataFrame
    probabilities: np.ndarray

    @classmethod
    def of(cls, artifact: ModelArtifact, directory: Path, request: pd.DataFrame) -> TrainedModel:
        """`artifact` as trained (its networks in memory) and `directory`, the files saved."""
        answered = answers(artifact, request)["probability"].to_numpy(dtype=float)
        return cls(files_digest(directory), request, answered)


@dataclass(frozen=True)
class Registered:
    version: str
    trained: TrainedModel


def package_requirements() -> list[str]:
    """The installed deepsummit distribution's own pins (no inference, no extras)."""
    requirements = importlib.metadata.requires("deepsummit") or []
    return [requirement for requirement in requirements if "extra ==" not in requirement]


def log_and_register(
    config: MlflowConfig,
    directory: Path,
    input_example: pd.DataFrame,
    artifact: ModelArtifact,
    lease: Lease | None = None,
) -> Registered:
    """Log the pyfunc (from code, with the artifact folder `directory`) in the active run,
    register it marked unverified, and record the digest of its files as they are stored,
    lifting the mark. Each step waits out a short MLflow outage; the version keeps its mark
    when the wait runs out after its creation. What the gate checks the version against is
    returned with it. A training that no longer holds its `lease` registers nothing."""
    if directory.name != ARTIFACT_NAME:  # MLflow stores the folder under its own name
        raise ValueError(
            f"the model folder must be named {ARTIFACT_NAME!r} (readers find it at "
            f"{ARTIFACT_PATH}), not {directory.name!r}"
        )
    trained = TrainedModel.of(artifact, directory, input_example)
    info = when_tracking_answers(
        config, "logging the model",
        lambda: mlflow.pyfunc.log_model(
            name="model",
            python_model=str(MODEL_CODE_FILE),
            artifacts={ARTIFACT_NAME: str(directory)},
            signature=signature(),
            input_example=input_example,
            pip_requirements=package_requirements(),
            metadata={"seeds": artifact.seeds},
        ),
    )  # fmt: skip
    if lease is not None:
        lease.check(config, "registering the model")
    # Created with its mark: a registration cut short anywhere after this leaves it marked
    # (a repeated try registers another version, marked until verified like this one).
    version = when_tracking_answers(
        config, "registering the model",
        lambda: mlflow.register_model(
            info.model_uri, config.registered_model, tags={TAG_UNVERIFIED: DIGEST_PENDING}
        ),
    )  # fmt: skip
    number = str(version.version)
    when_tracking_answers(
        config,
        f"v{number} registered marked {TAG_UNVERIFIED}: never champion until its files' digest "
        "is recorded",
        lambda: record_digest(config, number, info.model_uri),
    )
    return Registered(number, trained)


def record_digest(config: MlflowConfig, version: str, model_uri: str) -> None:
    """Tag the digest of the version's files as they are stored, then lift its unverified
    mark."""
    client, name = MlflowClient(config.tracking_uri), config.registered_model
    with tempfile.TemporaryDirectory() as folder:
        mlflow.artifacts.download_artifacts(artifact_uri=model_uri, dst_path=folder)
        digest = files_digest(Path(folder))
    client.set_model_version_tag(name, version, TAG_FILES_DIGEST, digest)
    if TAG_UNVERIFIED in client.get_model_version(name, version).tags:  # else lifted by a try
        client.delete_model_version_tag(name, version, TAG_UNVERIFIED)
