"""The registry as every stage reads it: which version is the champion, a data file of its model
artifact, and a version's files, used only when they are the ones registered (a registered model
is code that `predict`, the outlook and the gate execute).

The train stage registers versions (deepsummit/train/registration.py) and moves the alias
(deepsummit/train/registry.py); everything else only reads, through these lookups. MLflow is
imported only where it is used: `deepsummit predict` asks a tracking server for the champion
over its REST API and scores a verified copy kept in `mlflow.model_cache_dir`, so that a call
pays neither MLflow's import nor a download.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from deepsummit.contracts.artifact import ARTIFACT_NAME, files_digest
from deepsummit.core.errors import PipelineError, ServiceUnavailable
from deepsummit.core.http_retry import send
from deepsummit.core.sections import MlflowConfig, is_url

if TYPE_CHECKING:
    import mlflow.pyfunc
    from mlflow import MlflowClient
    from mlflow.entities.model_registry import ModelVersion

# Tags every registered version carries (written before the gate runs).
TAG_TEST_DIGEST = "test_split_digest"
TAG_WEATHER_SOURCE = "weather_source"
TAG_KNOWN_BY = "inputs_known_by"
TAG_TRAINED_THROUGH = "trained_through"  # the newest season the registered model learnt from
TAG_FILES_DIGEST = "model_files_sha256"
# On a version from its creation until its files' digest is recorded, and for good when its
# stored files are not the ones trained (its value says why): never champion, never loaded.
TAG_UNVERIFIED = "deepsummit.unverified"
TAG_DECISION = "champion_decision"
TAG_REASON = "champion_reason"

# Where the model artifact (deepsummit/contracts/artifact.py) lies in a registered version.
ARTIFACT_PATH = f"artifacts/{ARTIFACT_NAME}"
REGISTRY_TIMEOUT_S = 10.0
# What MLflow's client reads to reach a tracking server beyond a user and password or a token
# (TLS settings, an auth plugin): with any of them set, the champion is asked through MLflow.
_CLIENT_ONLY_VARIABLES = (
    "MLFLOW_TRACKING_INSECURE_TLS",
    "MLFLOW_TRACKING_SERVER_CERT_PATH",
    "MLFLOW_TRACKING_CLIENT_CERT_PATH",
    "MLFLOW_TRACKING_AUTH",
)
# The registry's answers that mean "no such model" and "no such alias".
_NOT_FOUND = frozenset({"RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"})


class ModelFilesChanged(PipelineError):
    """A registered version's files differ from the ones registered: never loaded."""


@dataclass(frozen=True)
class RegisteredVersion:
    """A registered version as its readers need it."""

    name: str
    version: str
    tags: dict[str, str]


def current_champion(client: MlflowClient, name: str, alias: str) -> ModelVersion | None:
    models = client.search_registered_models(filter_string=f"name = '{name}'")
    if not models or alias not in models[0].aliases:
        return None
    return client.get_model_version_by_alias(name, alias)


def champion_version(config: MlflowConfig) -> RegisteredVersion:
    """The version the champion alias names now (pin its number: the alias may move), or one
    line saying there is none."""
    name, alias = config.registered_model, config.champion_alias
    if _over_rest(config.tracking_uri):
        found = _alias_over_rest(config.tracking_uri, name, alias)
    else:
        found = _alias_by_client(config.tracking_uri, name, alias)
    if found is None:
        raise ServiceUnavailable(
            f"no model {name}@{alias} at {config.tracking_uri}: run `deepsummit train`"
        )
    return found


def _over_rest(tracking_uri: str) -> bool:
    return is_url(tracking_uri) and not any(
        os.environ.get(variable) for variable in _CLIENT_ONLY_VARIABLES
    )


def _credentials() -> dict[str, str]:
    """MLflow's own login variables as a header, as its client sends them."""
    user, password = (os.environ.get(f"MLFLOW_TRACKING_{k}") for k in ("USERNAME", "PASSWORD"))
    if user and password:
        return {
            "Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        }
    token = os.environ.get("MLFLOW_TRACKING_TOKEN")
    return {"Authorization": f"Bearer {token}"} if token else {}


def _alias_over_rest(tracking_uri: str, name: str, alias: str) -> RegisteredVersion | None:
    query = urllib.parse.urlencode({"name": name, "alias": alias})
    url = f"{tracking_uri.rstrip('/')}/api/2.0/mlflow/registered-models/alias?{query}"
    try:
        _, body = send(urllib.request.Request(url, headers=_credentials()), REGISTRY_TIMEOUT_S)
    except urllib.error.HTTPError as error:
        answer = error.read().decode(errors="replace")
        try:
            code = json.loads(answer).get("error_code")
        except ValueError:
            code = None
        if code in _NOT_FOUND:
            return None
        raise PipelineError(
            f"MLflow registry {tracking_uri}: HTTP {error.code} {error.reason} to the champion "
            f"lookup ({' '.join(answer.split())[:200]})"
        ) from None
    except (urllib.error.URLError, OSError) as error:
        if isinstance(error, PipelineError):  # transient answers until the retries ran out
            raise
        reason = getattr(error, "reason", error)
        raise ServiceUnavailable(
            f"MLflow registry {tracking_uri} is not answering ({reason})"
        ) from None
    found = json.loads(body)["model_version"]
    tags = {tag["key"]: tag["value"] for tag in found.get("tags", [])}
    return RegisteredVersion(found["name"], str(found["version"]), tags)


def _alias_by_client(tracking_uri: str, name: str, alias: str) -> RegisteredVersion | None:
    import mlflow

    try:
        found = mlflow.MlflowClient(tracking_uri).get_model_version_by_alias(name, alias)
    except mlflow.exceptions.MlflowException:
        return None
    return RegisteredVersion(found.name, str(found.version), dict(found.tags))


def registry_reachable(tracking_uri: str, timeout_s: float = 3.0) -> bool:
    """A file or database store is always there; a tracking server answers its health check
    (asked quickly: a server that is down is not retried, so a stage that only reads from the
    registry does not hang; a busy one's transient answers are)."""
    if not is_url(tracking_uri):
        return True
    try:
        send(urllib.request.Request(f"{tracking_uri.rstrip('/')}/health"), timeout_s)
    except (urllib.error.URLError, OSError, ValueError):
        return False
    return True


def champion_file(config: MlflowConfig, relative: str) -> tuple[str, Path] | None:
    """(version, local copy) of a data file of the champion's model artifact (e.g. its drift
    reference); None without a reachable registry, a champion, or that file."""
    import mlflow

    if not registry_reachable(config.tracking_uri):
        return None
    client = mlflow.MlflowClient(config.tracking_uri)
    champion = current_champion(client, config.registered_model, config.champion_alias)
    if champion is None:
        return None
    mlflow.set_tracking_uri(config.tracking_uri)
    uri = f"models:/{config.registered_model}/{champion.version}/{ARTIFACT_PATH}"
    try:
        local = mlflow.artifacts.download_artifacts(artifact_uri=f"{uri}/{relative}")
    except mlflow.exceptions.MlflowException:
        return None  # a champion from before the file existed
    return str(champion.version), Path(local)


def verified_copy(
    tracking_uri: str, version: RegisteredVersion, cache_dir: Path | None = None
) -> Path:
    """A local folder holding `version`'s files, checked against the digest registered with it
    (a version marked unverified is refused at once).

    With `cache_dir`, the copy kept there by an earlier call is used while its files still have
    that digest (it is checked on every use, so a copy changed on disk is never used: it is
    downloaded again); without, a fresh download into a temporary folder.
    """
    if TAG_UNVERIFIED in version.tags:
        raise ModelFilesChanged(
            f"{version.name} v{version.version} is marked {TAG_UNVERIFIED} "
            f"({version.tags[TAG_UNVERIFIED]}): not loaded"
        )
    expected = version.tags.get(TAG_FILES_DIGEST)
    if cache_dir is None:
        folder = Path(tempfile.mkdtemp(prefix=f"{version.name}-v{version.version}-"))
    else:
        registry = hashlib.sha256(tracking_uri.encode()).hexdigest()[:16]
        folder = cache_dir / registry / version.name / f"v{version.version}"
        if expected is not None and folder.is_dir() and files_digest(folder) == expected:
            return folder

    def check(staged: Path) -> None:  # nothing unverified is left to be loaded
        found = files_digest(staged)
        if expected is None or found != expected:
            raise ModelFilesChanged(
                f"{version.name} v{version.version}: its files' sha256 is {found[:12]}, "
                f"registered {(expected or 'none')[:12]}: not loaded"
            )

    download_folder(tracking_uri, f"models:/{version.name}/{version.version}", folder, check)
    return folder


def experiment_named(client: MlflowClient, name: str) -> str:
    """The id of the experiment `name`, created when missing (or the one another worker
    created meanwhile)."""
    from mlflow.exceptions import MlflowException

    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    try:
        return client.create_experiment(
            name, artifact_location=_artifacts_beside(client.tracking_uri, name)
        )
    except MlflowException:
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            raise
        return experiment.experiment_id


def set_experiment(tracking_uri: str, name: str) -> str:
    """Make `name` at `tracking_uri` MLflow's active experiment, created as `experiment_named`
    creates it; its id."""
    import mlflow

    mlflow.set_tracking_uri(tracking_uri)
    experiment_id = experiment_named(mlflow.MlflowClient(tracking_uri), name)
    mlflow.set_experiment(experiment_id=experiment_id)
    return experiment_id


def _artifacts_beside(tracking_uri: str, name: str) -> str | None:
    """Where a new experiment of a SQLite store keeps its files: beside the database. MLflow's
    own default is ./mlruns of whichever folder the process runs in (the checkout, for a
    command or a flow run). None, the server's default, for a tracking server."""
    if not tracking_uri.startswith("sqlite:///"):
        return None
    database = Path(tracking_uri.removeprefix("sqlite:///")).resolve()
    return (database.parent / "mlartifacts" / name).as_uri()


def download_folder(
    tracking_uri: str, artifact_uri: str, folder: Path, check: Callable[[Path], None]
) -> None:
    """`artifact_uri`'s files into `folder` (replacing what is there), downloaded beside it and
    passed to `check` first (which raises to refuse them: then nothing is left in `folder`), so
    that a process reading `folder` meanwhile sees the old copy or the whole new one.

    Files the registry cannot hand over are ServiceUnavailable, one line: for example a version
    whose files the tracking server serves (mlflow-artifacts:/), asked through its database."""
    import mlflow
    from mlflow.exceptions import MlflowException

    # models:/ and runs:/ URIs resolve through the global tracking URI
    mlflow.set_tracking_uri(tracking_uri)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        try:
            local = Path(
                mlflow.artifacts.download_artifacts(
                    artifact_uri=artifact_uri, dst_path=str(staging)
                )
            )
        except MlflowException as error:
            reason = " ".join(error.message.split()).split(". ")[0]
            raise ServiceUnavailable(
                f"{artifact_uri} cannot be downloaded through {tracking_uri}: {reason}"
            ) from None
        shutil.rmtree(folder, ignore_errors=True)  # stale: it is why this downloads
        check(local)
        try:
            local.rename(folder)
        except OSError:
            if not folder.is_dir():
                raise
            # Another process put its checked download there meanwhile.
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def load_verified(
    tracking_uri: str, name: str, version: str, cache_dir: Path | None = None
) -> mlflow.pyfunc.PyFuncModel:
    """The pyfunc of version `version`, after checking that its files are the ones registered
    (a registered model is code that `predict` and the gate execute); `cache_dir` as for
    `verified_copy`. Without one, the temporary copy is removed once loaded: the model reads
    all its files when it loads."""
    import mlflow.pyfunc

    tags = mlflow.MlflowClient(tracking_uri).get_model_version(name, version).tags
    local = verified_copy(tracking_uri, RegisteredVersion(name, str(version), tags), cache_dir)
    try:
        return mlflow.pyfunc.load_model(str(local))
    finally:
        if cache_dir is None:
            shutil.rmtree(local, ignore_errors=True)
