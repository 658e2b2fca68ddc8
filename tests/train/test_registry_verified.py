"""A version becomes champion only once loaded from a real MLflow server as the model trained:
its stored files have the registered digest and the trained files' digest, and it answers a few
test rows as the trained model did. A registration cut short by MLflow going away leaves the
version marked unverified, never champion; a short outage is waited out, a long one fails in
one line."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import polars as pl
import pytest
from mlflow import MlflowClient
from services_fixtures import mlflow_server_settings, start_mlflow, stop_mlflow
from training_fixtures import TrainedRegistry

from deepsummit.contracts.artifact import ARTIFACT_NAME, ModelArtifact
from deepsummit.contracts.champion import (
    TAG_FILES_DIGEST,
    TAG_UNVERIFIED,
    ModelFilesChanged,
    load_verified,
)
from deepsummit.contracts.snapshot import PLANNED_TEST_FILE
from deepsummit.contracts.training_lease import Lease
from deepsummit.core.config import Settings
from deepsummit.core.errors import PipelineError, ServiceUnavailable
from deepsummit.core.inputs import Known
from deepsummit.core.planned import KEY_COLUMNS
from deepsummit.core.sections import MlflowConfig
from deepsummit.services import supervisor as services
from deepsummit.services.local import mlflow_store
from deepsummit.train.registration import Registered, TrainedModel, log_and_register
from deepsummit.train.registry import Candidate, gate
from deepsummit.train.tracking import training_run

pytest_plugins = ["features_fixtures", "training_fixtures"]
pytestmark = pytest.mark.long

# Long enough for the server to be started again (about 7 s alone; more on a busy machine).
SHORT_OUTAGE_WAIT_S = 120.0
LONG_OUTAGE_WAIT_S = 3.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """A real MLflow server (the `deepsummit up` one) on a free port, its files in a folder."""
    settings = mlflow_server_settings(tmp_path_factory.mktemp("server"))
    start_mlflow(settings)
    yield settings
    services.down(settings)


@pytest.fixture
def mlflow_config(
    server: Settings, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> MlflowConfig:
    """The server's settings with a registered model of this test's own (so no champion yet),
    and MLflow's own retries off: what waits out an outage is deepsummit's, not MLflow's
    (whose retries alone wait about 4 minutes by default)."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    mlflow.set_tracking_uri(server.mlflow.tracking_uri)
    mlflow.set_experiment(server.mlflow.experiment)
    return server.mlflow.model_copy(
        update={
            "registered_model": request.node.name.removeprefix("test_")[:60],
            "unreachable_wait_s": LONG_OUTAGE_WAIT_S,
        }
    )


def register(
    registry: TrainedRegistry, config: MlflowConfig, folder: Path, lease: Lease | None = None
) -> Registered:
    """Register the trained champion's artifact (saved again into `folder`) under `config`."""
    artifact = ModelArtifact.load(registry.model_dir)
    request = pl.read_parquet(registry.snapshot / PLANNED_TEST_FILE).head(3).drop(KEY_COLUMNS)
    with training_run({}):
        return log_and_register(config, artifact.save(folder), request.to_pandas(), artifact, lease)


def candidate(registered: Registered) -> Candidate:
    """The facts the gate keeps; with no champion yet, it decides on the version alone."""
    return Candidate(
        version=registered.version,
        test_digest="test split",
        weather_source="archive",
        inputs_known_by=Known.AT_PUSH,
        predictions=pl.DataFrame({"probability": [0.5]}),
        member_predictions=pl.DataFrame({"probability": [0.5]}),
        trained_through="2025 Summer",
        trained=registered.trained,
    )


def champion_of(config: MlflowConfig) -> str | None:
    found = MlflowClient(config.tracking_uri).get_registered_model(config.registered_model)
    version = found.aliases.get(config.champion_alias)
    return None if version is None else str(version)


def stored_files(server: Settings, config: MlflowConfig, version: str) -> Path:
    """The server's own copy of the version's model artifact folder."""
    source = (
        MlflowClient(config.tracking_uri).get_model_version(config.registered_model, version).source
    )
    model_id = source.removeprefix("models:/")  # the logged model's id, its folder's name
    [calibration] = [
        path for path in mlflow_store(server)[1].rglob("calibration.json") if model_id in path.parts
    ]
    return calibration.parent


def after_registering(monkeypatch: pytest.MonkeyPatch, then: Callable[[], None]) -> None:
    """Run `then` right after MLflow creates the version (before its files' digest is
    recorded)."""
    register_model = mlflow.register_model

    def registered_then(*args: Any, **kwargs: Any) -> Any:
        version = register_model(*args, **kwargs)
        then()
        return version

    monkeypatch.setattr(mlflow, "register_model", registered_then)


def change_a_stored_file(stored: Path) -> None:
    """One byte more in the stored calibration map: the same map, other files."""
    calibration = stored / "calibration.json"
    calibration.write_text(calibration.read_text().replace('"method"', '"method" ', 1))


def test_a_version_whose_stored_files_changed_after_registering_is_not_promoted(
    trained_registry: TrainedRegistry,
    server: Settings,
    mlflow_config: MlflowConfig,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    registered = register(trained_registry, mlflow_config, tmp_path / ARTIFACT_NAME)
    change_a_stored_file(stored_files(server, mlflow_config, registered.version))

    caplog.set_level(logging.INFO, logger="deepsummit")
    client = MlflowClient(mlflow_config.tracking_uri)
    decision = gate(client, mlflow_config, server.backtest, candidate(registered))

    assert not decision.promoted and champion_of(mlflow_config) is None
    name = mlflow_config.registered_model
    assert f"{name} v{registered.version}: its files' sha256 is" in decision.reason
    [line] = [r.getMessage() for r in caplog.records if "not the model trained" in r.getMessage()]
    assert "\n" not in line
    tags = client.get_model_version(name, registered.version).tags
    assert tags["champion_decision"] == "challenger"


def test_files_changed_before_the_digest_is_recorded_are_not_the_trained_ones(
    trained_registry: TrainedRegistry,
    server: Settings,
    mlflow_config: MlflowConfig,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The digest is recorded from the stored files: it matches them, and the gate still sees
    that they are not the files trained."""

    def change_stored_files() -> None:
        [version] = MlflowClient(mlflow_config.tracking_uri).search_model_versions(
            f"name = '{mlflow_config.registered_model}'"
        )
        change_a_stored_file(stored_files(server, mlflow_config, str(version.version)))

    after_registering(monkeypatch, change_stored_files)
    registered = register(trained_registry, mlflow_config, tmp_path / ARTIFACT_NAME)
    client = MlflowClient(mlflow_config.tracking_uri)
    decision = gate(client, mlflow_config, server.backtest, candidate(registered))

    assert not decision.promoted and champion_of(mlflow_config) is None
    assert "its stored files' sha256 is" in decision.reason
    assert "the trained files'" in decision.reason


def test_a_version_answering_unlike_the_trained_model_is_not_promoted(
    trained_registry: TrainedRegistry,
    server: Settings,
    mlflow_config: MlflowConfig,
    tmp_path: Path,
) -> None:
    registered = register(trained_registry, mlflow_config, tmp_path / ARTIFACT_NAME)
    trained = registered.trained
    assert trained.probabilities.size == 3 and not np.isnan(trained.probabilities).any()
    elsewhere = dataclasses.replace(trained, probabilities=trained.probabilities + 1e-3)
    client = MlflowClient(mlflow_config.tracking_uri)
    decision = gate(
        client,
        mlflow_config,
        server.backtest,
        candidate(dataclasses.replace(registered, trained=elsewhere)),
    )
    assert not decision.promoted and champion_of(mlflow_config) is None
    assert "answers 3 test rows up to 0.001 away from the trained model" in decision.reason

    # The same version, checked against what it was trained to answer: promoted.
    assert gate(client, mlflow_config, server.backtest, candidate(registered)).promoted
    assert champion_of(mlflow_config) == registered.version


def test_mlflow_gone_before_the_digest_leaves_the_version_marked_never_champion(
    trained_registry: TrainedRegistry,
    server: Settings,
    mlflow_config: MlflowConfig,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stopped: list[float] = []

    def outage() -> None:
        stop_mlflow(server)
        stopped.append(time.monotonic())

    after_registering(monkeypatch, outage)
    artifact = ModelArtifact.load(trained_registry.model_dir)
    directory = artifact.save(tmp_path / ARTIFACT_NAME)
    request = pl.read_parquet(trained_registry.snapshot / PLANNED_TEST_FILE).head(3)
    request = request.drop(KEY_COLUMNS).to_pandas()
    try:
        with pytest.raises(ServiceUnavailable) as raised, training_run({}):
            log_and_register(mlflow_config, directory, request, artifact)
        waited = time.monotonic() - stopped[0]
    finally:
        start_mlflow(server)
    assert LONG_OUTAGE_WAIT_S <= waited < LONG_OUTAGE_WAIT_S + 30  # bounded, as configured
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(
        f"MLflow tracking server {mlflow_config.tracking_uri} did not answer for 3 s (v1 "
        f"registered marked {TAG_UNVERIFIED}: never champion until its files' digest is "
        "recorded)"
    )

    client = MlflowClient(mlflow_config.tracking_uri)
    name = mlflow_config.registered_model
    tags = client.get_model_version(name, "1").tags
    assert TAG_UNVERIFIED in tags and TAG_FILES_DIGEST not in tags
    trained = TrainedModel.of(artifact, directory, request)
    decision = gate(client, mlflow_config, server.backtest, candidate(Registered("1", trained)))
    assert not decision.promoted and champion_of(mlflow_config) is None
    assert f"{name} v1 is marked {TAG_UNVERIFIED}" in decision.reason
    with pytest.raises(ModelFilesChanged, match=f"v1 is marked {TAG_UNVERIFIED}"):
        load_verified(mlflow_config.tracking_uri, name, "1")  # as `predict` would


def test_a_short_outage_during_registration_and_the_gate_is_waited_out(
    trained_registry: TrainedRegistry,
    server: Settings,
    mlflow_config: MlflowConfig,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = mlflow_config.model_copy(update={"unreachable_wait_s": SHORT_OUTAGE_WAIT_S})
    restarts: list[threading.Thread] = []

    def outage() -> None:
        """Stop the server now, start it again from another thread (it answers some seconds
        later)."""
        stop_mlflow(server)
        restart = threading.Thread(target=start_mlflow, args=(server,))
        restart.start()
        restarts.append(restart)

    caplog.set_level(logging.INFO, logger="deepsummit")
    try:
        with monkeypatch.context() as patched:
            after_registering(patched, outage)
            registered = register(trained_registry, config, tmp_path / ARTIFACT_NAME)
        outage()  # and again before the gate
        client = MlflowClient(config.tracking_uri)
        decision = gate(client, config, server.backtest, candidate(registered))
    finally:
        for restart in restarts:
            restart.join()
    tags = client.get_model_version(config.registered_model, registered.version).tags
    assert TAG_FILES_DIGEST in tags and TAG_UNVERIFIED not in tags
    assert decision.promoted and champion_of(config) == registered.version
    waits = [r.getMessage() for r in caplog.records if "is not answering" in r.getMessage()]
    assert len(waits) == 2, waits
    assert "(v1 registered marked" in waits[0] and "(gate of v1: its facts)" in waits[1]


def test_a_training_taken_for_lost_cannot_register_once_the_next_one_holds_the_lease(
    trained_registry: TrainedRegistry, mlflow_config: MlflowConfig, tmp_path: Path
) -> None:
    """The chain named the lost training's successor on the lease: the lost one, still
    running on a worker cut off from the chain, registers nothing; the holder does."""
    client = MlflowClient(mlflow_config.tracking_uri)
    snapshot_run = client.create_run(client.create_experiment("lease")).info.run_id
    lost, holder = Lease(snapshot_run, "lost-run"), Lease(snapshot_run, "next-run")
    lost.grant(mlflow_config)
    holder.grant(mlflow_config)  # the chain started the next training

    with pytest.raises(PipelineError) as refused:
        register(trained_registry, mlflow_config, tmp_path / "a" / ARTIFACT_NAME, lost)

    [line] = str(refused.value).splitlines()
    assert line == (
        "train: registering the model refused: flow run next-run holds the training lease, "
        "not this flow run lost-run (taken for lost and started again)"
    )
    assert client.search_model_versions(f"name = '{mlflow_config.registered_model}'") == []
    registered = register(trained_registry, mlflow_config, tmp_path / "b" / ARTIFACT_NAME, holder)
    assert registered.version == "1"
