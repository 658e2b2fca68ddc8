"""The registry as every stage reads it: which version is the champion, a data file of its model
artifact, and a version's pyfunc, loaded only when its files are the ones registered (a
registered model is code that `predict`, the outlook and the gate execute).

The train stage registers versions and moves the alias (deepsummit/train/registry.py); everything
else only reads, through these lookups.
"""

from __future__ import annotations

import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import mlflow
from mlflow import MlflowClient
from mlflow.entities.model_registry import ModelVersion

from deepsummit.contracts.artifact import ARTIFACT_NAME, files_digest
from deepsummit.core.config import MlflowConfig
from deepsummit.core.errors import PipelineError
from deepsummit.core.http_retry import send

# Tags every registered version carries (written before the gate runs).
TAG_TEST_DIGEST = "test_split_digest"
TAG_WEATHER_SOURCE = "weather_source"
TAG_KNOWN_BY = "inputs_known_by"
TAG_TRAINED_THROUGH = "trained_through"  # the newest season the registered model learnt from
TAG_FILES_DIGEST = "model_files_sha256"
TAG_DECISION = "champion_decision"
TAG_REASON = "champion_reason"


class ModelFilesChanged(PipelineError):
    """A registered version's files differ from the ones registered: never loaded."""


def current_champion(client: MlflowClient, name: str, alias: str) -> ModelVersion | None:
    models = client.search_registered_models(filter_string=f"name = '{name}'")
    if not models or alias not in models[0].aliases:
        return None
    return client.get_model_version_by_alias(name, alias)


def champion_version(config: MlflowConfig) -> ModelVersion:
    """The version the champion alias names now (pin its number: the alias may move), or one
    line saying there is none."""
    client = MlflowClient(config.tracking_uri)
    name, alias = config.registered_model, config.champion_alias
    try:
        return client.get_model_version_by_alias(name, alias)
    except mlflow.exceptions.MlflowException:
        raise PipelineError(
            f"no model {name}@{alias} at {config.tracking_uri}: run `deepsummit train`"
        ) from None


def registry_reachable(tracking_uri: str, timeout_s: float = 3.0) -> bool:
    """A file or database store is always there; a tracking server answers its health check
    (asked quickly: a server that is down is not retried, so a stage that only reads from the
    registry does not hang; a busy one's transient answers are)."""
    if not tracking_uri.startswith(("http://", "https://")):
        return True
    try:
        send(urllib.request.Request(f"{tracking_uri.rstrip('/')}/health"), timeout_s)
    except (urllib.error.URLError, OSError, ValueError):
        return False
    return True


def champion_file(config: MlflowConfig, relative: str) -> tuple[str, Path] | None:
    """(version, local copy) of a data file of the champion's model artifact (e.g. its drift
    reference); None without a reachable registry, a champion, or that file."""
    if not registry_reachable(config.tracking_uri):
        return None
    client = MlflowClient(config.tracking_uri)
    champion = current_champion(client, config.registered_model, config.champion_alias)
    if champion is None:
        return None
    mlflow.set_tracking_uri(config.tracking_uri)
    uri = f"models:/{config.registered_model}/{champion.version}/artifacts/{ARTIFACT_NAME}"
    try:
        local = mlflow.artifacts.download_artifacts(artifact_uri=f"{uri}/{relative}")
    except mlflow.exceptions.MlflowException:
        return None  # a champion from before the file existed
    return str(champion.version), Path(local)


def load_verified(tracking_uri: str, name: str, version: str) -> mlflow.pyfunc.PyFuncModel:
    """The pyfunc of version `version`, after checking that its files are the ones registered
    (a registered model is code that `predict` and the gate execute)."""
    mlflow.set_tracking_uri(tracking_uri)  # models:/ URIs resolve through the global registry
    expected = (
        MlflowClient(tracking_uri).get_model_version(name, version).tags.get(TAG_FILES_DIGEST)
    )
    local = Path(tempfile.mkdtemp(prefix=f"{name}-v{version}-"))
    mlflow.artifacts.download_artifacts(
        artifact_uri=f"models:/{name}/{version}", dst_path=str(local)
    )
    found = files_digest(local)
    if expected is None or found != expected:
        raise ModelFilesChanged(
            f"{name} v{version}: its files' sha256 is {found[:12]}, registered "
            f"{(expected or 'none')[:12]}: not loaded"
        )
    return mlflow.pyfunc.load_model(str(local))
