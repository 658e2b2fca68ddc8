"""The production registry's auth app (deployments/mlflow-auth.ini, as docker-compose.yml runs
it) on a local MLflow server: no write without a login, the pipeline user made once by the
admin may register and move `@champion`, another user may only read."""

from __future__ import annotations

import pytest
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from services_fixtures import STARTUP_TIMEOUT_S, free_port, start_mlflow_auth

from deepsummit.contracts.champion import champion_version
from deepsummit.core.config import load_settings
from deepsummit.core.errors import PipelineError
from deepsummit.services import supervisor as services
from deepsummit.services.mlflow_users import ensure_user

ADMIN = ("admin", "admin-password-for-tests")
PIPELINE = ("pipeline", "pipeline-password-for-tests")
READER = ("reader", "reader-password-for-tests")


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("auth")
    port = free_port()
    settings = load_settings(
        overrides={"services": {"run_dir": str(root / "services"), "mlflow_port": port}}
    )
    start_mlflow_auth(settings, root, ADMIN)
    services.wait_healthy(
        settings, services.MLFLOW_SERVER, services.mlflow_healthy, STARTUP_TIMEOUT_S
    )
    yield f"http://127.0.0.1:{port}"
    services.down(settings)


def login(monkeypatch: pytest.MonkeyPatch, user: tuple[str, str] | None) -> None:
    if user is None:
        monkeypatch.delenv("MLFLOW_TRACKING_USERNAME", raising=False)
        monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD", raising=False)
    else:
        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", user[0])
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", user[1])
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")


def test_a_write_without_a_login_is_refused(registry: str, monkeypatch) -> None:
    login(monkeypatch, None)
    with pytest.raises(MlflowException, match=r"401|Unauthorized|credentials"):
        MlflowClient(registry).create_experiment("anonymous")


def test_only_the_pipeline_moves_the_champion(registry: str, monkeypatch, tmp_path) -> None:
    login(monkeypatch, ADMIN)
    assert ensure_user(registry, *PIPELINE) is True
    assert ensure_user(registry, *PIPELINE) is False  # a rerun of the compose job changes nothing
    ensure_user(registry, *READER)

    login(monkeypatch, PIPELINE)
    client = MlflowClient(registry)
    experiment = client.create_experiment("deepsummit")
    run = client.create_run(experiment)
    (tmp_path / "model.txt").write_text("weights")
    client.log_artifact(run.info.run_id, str(tmp_path / "model.txt"), "model")
    client.create_registered_model("deepsummit")
    version = client.create_model_version(
        "deepsummit", f"runs:/{run.info.run_id}/model", run.info.run_id
    )
    client.set_registered_model_alias("deepsummit", "champion", version.version)

    login(monkeypatch, READER)
    reader = MlflowClient(registry)
    assert reader.get_model_version_by_alias("deepsummit", "champion").version == version.version
    with pytest.raises(MlflowException, match=r"PERMISSION_DENIED|Permission denied|403"):
        reader.set_registered_model_alias("deepsummit", "champion", version.version)

    # `deepsummit predict` asks for the champion over the REST API, with MLflow's own login.
    config = load_settings(overrides={"mlflow": {"tracking_uri": registry}}).mlflow
    assert champion_version(config).version == version.version
    login(monkeypatch, None)
    with pytest.raises(PipelineError, match=r"HTTP 401"):
        champion_version(config)
