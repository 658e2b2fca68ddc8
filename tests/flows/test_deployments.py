"""prefect.yaml and the files of deployments/: what cannot run here (no Docker engine, no
Kubernetes) is parsed, validated with Prefect's own models and rendered with its templating."""

from __future__ import annotations

import json
import re
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from prefect.cli.deploy._models import PrefectYamlModel
from prefect.client.schemas.objects import FlowRun
from prefect.utilities.schema_tools import ValidationError, validate
from prefect.utilities.templating import apply_values, find_placeholders
from prefect.workers.process import ProcessJobConfiguration

from deepsummit.core.config import Settings
from deepsummit.core.sections import PROJECT_ROOT

DEPLOYMENTS = PROJECT_ROOT / "deployments"
TEMPLATES = (
    "process-job-template.json",
    "docker-gpu-job-template.json",
    "kubernetes-gpu-job-template.json",
)


@pytest.fixture(scope="module")
def prefect_yaml() -> dict[str, Any]:
    document = yaml.safe_load((PROJECT_ROOT / "prefect.yaml").read_text())
    PrefectYamlModel.model_validate(document)  # the schema `prefect deploy` applies
    return {d["name"]: d for d in document["deployments"]}


def test_train_runs_the_summit_flow_nightly_one_at_a_time(prefect_yaml: dict) -> None:
    train = prefect_yaml["train"]
    path, _, name = train["entrypoint"].partition(":")
    assert (PROJECT_ROOT / path).exists()
    from deepsummit.flows import summit

    assert getattr(summit, name).name == "summit"  # `prefect deployment run summit/train`
    assert train["work_pool"]["name"] == Settings().services.work_pool
    assert train["schedules"] == [
        {"cron": "0 2 * * *", "timezone": "Asia/Kathmandu", "active": True}
    ]
    assert train["concurrency_limit"] == {"limit": 1, "collision_strategy": "ENQUEUE"}


def test_backtest_runs_weekly_off_season_one_at_a_time(prefect_yaml: dict) -> None:
    backtest = prefect_yaml["backtest"]
    path, _, name = backtest["entrypoint"].partition(":")
    assert (PROJECT_ROOT / path).exists()
    from deepsummit.flows import summit

    assert getattr(summit, name).name == "summit"  # `prefect deployment run summit/backtest`
    (schedule,) = backtest["schedules"]
    _, _, day, months, weekday = schedule["cron"].split()
    climbing = {4, 5, 9, 10}  # the outlook's months
    listed = {
        m
        for part in months.split(",")
        for m in range(int(part.split("-")[0]), int(part.split("-")[-1]) + 1)
    }
    assert listed == set(range(1, 13)) - climbing and day == "*" and weekday != "*"
    assert backtest["concurrency_limit"] == {"limit": 1, "collision_strategy": "ENQUEUE"}


def test_gpu_variant_trains_the_base_profile_on_the_gpu_pool(prefect_yaml: dict) -> None:
    gpu = prefect_yaml["train-gpu"]
    assert gpu["entrypoint"] == prefect_yaml["train"]["entrypoint"]
    assert gpu["work_pool"]["name"] == Settings().services.gpu_work_pool
    assert gpu["parameters"]["profile"] == "base"
    assert gpu["concurrency_limit"]["limit"] == 1
    # One nightly training per machine: the GPU schedule exists but starts paused.
    assert [s["cron"] for s in gpu["schedules"]] == ["0 2 * * *"]
    assert gpu["schedules"][0]["active"] is False


def _template(name: str) -> dict[str, Any]:
    return json.loads((DEPLOYMENTS / name).read_text())


@pytest.mark.parametrize("name", TEMPLATES)
def test_job_configuration_only_references_defined_variables(name: str) -> None:
    template = _template(name)
    referenced = {p.name for p in find_placeholders(template["job_configuration"])}
    defined = set(template["variables"]["properties"])
    assert referenced, "a template without variables configures nothing"
    assert referenced <= defined, f"undefined: {referenced - defined}"


def _rendered(name: str, values: dict[str, Any] | None = None) -> dict[str, Any]:
    """The job configuration as a worker renders it with the variables' defaults and `values`
    (BaseJobConfiguration.from_template_and_values, whose block and variable lookups these
    templates do not use)."""
    template = _template(name)
    defaults = {
        key: spec["default"]
        for key, spec in template["variables"]["properties"].items()
        if "default" in spec
    }
    return apply_values(template["job_configuration"], {**defaults, **(values or {})})


def test_docker_template_requests_gpus_through_the_nvidia_runtime() -> None:
    (request,) = _rendered("docker-gpu-job-template.json")["container_create_kwargs"][
        "device_requests"
    ]
    # docker-py's DeviceRequest: `docker run --gpus all` is count -1 with capability "gpu".
    assert request == {"driver": "nvidia", "count": -1, "capabilities": [["gpu"]]}


def test_kubernetes_template_puts_the_gpu_count_in_resource_limits() -> None:
    manifest = _rendered("kubernetes-gpu-job-template.json")["job_manifest"]
    pod = manifest["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert container["image"] == "deepsummit:gpu"
    assert any(t["key"] == "nvidia.com/gpu" for t in pod["tolerations"])
    raw = _template("kubernetes-gpu-job-template.json")["job_configuration"]["job_manifest"]
    limits = raw["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "{{ gpu_count }}"  # a variable, not a fixed count


def test_process_template_is_what_the_local_pool_is_created_with() -> None:
    from deepsummit.services.supervisor import PROCESS_JOB_TEMPLATE

    assert PROCESS_JOB_TEMPLATE.name in TEMPLATES


def _check_job_variables(job_variables: dict[str, Any]) -> None:
    """What the server does to a flow run's job variables before it accepts the run
    (prefect.server.api.validation): validate them against the pool's variables schema."""
    schema = _template("process-job-template.json")["variables"]
    validate(job_variables, schema, raise_on_error=True, preprocess=True, ignore_required=True)


@pytest.mark.parametrize(
    "job_variables",
    [
        {"command": "touch /tmp/deepsummit-pwned"},
        {"working_dir": "/tmp"},
        {"env": {"PYTHONSTARTUP": "/tmp/evil.py"}},
        {"env": {"LD_PRELOAD": "/tmp/evil.so"}},
        {"env.LD_PRELOAD": "/tmp/evil.so"},  # the worker reads a dotted key as env's
    ],
)
def test_process_pool_refuses_a_command_or_code_loading_environment(
    job_variables: dict[str, Any],
) -> None:
    with pytest.raises(ValidationError):
        _check_job_variables(job_variables)


def test_process_pool_takes_deepsummit_settings_in_env() -> None:
    _check_job_variables({"env": {"DEEPSUMMIT_TRAIN__MAX_EPOCHS": "3"}, "stream_output": False})


def test_process_worker_runs_its_own_command_whatever_the_run_sends() -> None:
    """Even a variable the server let through (one stored before this template) cannot set the
    command: the job configuration has no place for it."""
    sent = {"command": "touch /tmp/deepsummit-pwned", "working_dir": "/tmp"}
    configuration = ProcessJobConfiguration(**_rendered("process-job-template.json", sent))
    configuration.prepare_for_flow_run(FlowRun(id=uuid.uuid4(), flow_id=uuid.uuid4()))
    assert configuration.command == f"{sys.executable} -m prefect.engine"
    assert configuration.working_dir is None


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOYMENTS / "docker-compose.yml").read_text())


# Compose's interpolation: ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?error},
# ${NAME?error}; `$$` is a literal `$` (a variable of the container's shell).
COMPOSE_VARIABLE = re.compile(r"(?<!\$)\$\{(\w+)(?:(:?[-?])([^}]*))?\}")
# Addresses people browse, not secrets: these alone may fall back to a default.
COMPOSE_ADDRESSES = {"PREFECT_UI_URL", "MLFLOW_UI_URL"}


def _interpolate(text: str, env: dict[str, str]) -> str:
    def value(match: re.Match) -> str:
        name, operator, argument = match.groups()
        if name in env and (env[name] or not (operator or "").startswith(":")):
            return env[name]
        if operator and operator.endswith("?"):
            raise KeyError(f"{name}: {argument}")
        return argument if operator else ""

    return COMPOSE_VARIABLE.sub(value, text).replace("$$", "$")


def test_compose_requires_every_secret_and_defaults_only_addresses() -> None:
    text = (DEPLOYMENTS / "docker-compose.yml").read_text()
    references = COMPOSE_VARIABLE.findall(text)
    assert references
    defaulted = {name for name, operator, _ in references if operator != ":?"}
    assert defaulted <= COMPOSE_ADDRESSES, defaulted - COMPOSE_ADDRESSES
    secrets = {name for name, _, _ in references} - COMPOSE_ADDRESSES
    assert secrets >= {"PREFECT_AUTH_STRING", "PREFECT_DB_PASSWORD", "MINIO_ROOT_PASSWORD"}
    for missing in secrets:
        given = {name: f"{name.lower()}-value" for name in secrets - {missing}}
        with pytest.raises(KeyError, match=f"{missing}: set {missing}"):
            _interpolate(text, given)
    rendered = yaml.safe_load(_interpolate(text, {name: f"<{name}>" for name in secrets}))
    prefect = rendered["services"]["prefect-server"]["environment"]
    assert prefect["PREFECT_SERVER_API_AUTH_STRING"] == "<PREFECT_AUTH_STRING>"
    assert "$${MINIO_ROOT_USER}" in text  # the bucket job's shell variable stays a variable
    assert "${MINIO_ROOT_USER}" in rendered["services"]["minio-bucket"]["entrypoint"]


def test_compose_publishes_ports_on_loopback_only(compose: dict) -> None:
    services = compose["services"]
    published = {name: service["ports"] for name, service in services.items() if "ports" in service}
    assert set(published) >= {"prefect-server", "mlflow", "minio"}
    for name, ports in published.items():
        assert all(str(port).startswith("127.0.0.1:") for port in ports), (name, ports)


def test_compose_prefect_requires_the_login_and_csrf_and_its_own_origin(compose: dict) -> None:
    services = compose["services"]
    server = services["prefect-server"]["environment"]
    assert server["PREFECT_SERVER_API_AUTH_STRING"].startswith("${PREFECT_AUTH_STRING:?")
    assert server["PREFECT_SERVER_CSRF_PROTECTION_ENABLED"] == "true"
    assert server["PREFECT_SERVER_CORS_ALLOWED_ORIGINS"] == server["PREFECT_UI_URL"]
    assert "*" not in server["PREFECT_SERVER_CORS_ALLOWED_ORIGINS"]
    worker = services["gpu-worker"]["environment"]
    assert worker["PREFECT_API_AUTH_STRING"] == server["PREFECT_SERVER_API_AUTH_STRING"]
    mlflow = services["mlflow"]["command"]
    hosts = re.search(r"--allowed-hosts (\S+)", mlflow).group(1).split(",")
    assert "mlflow:5000" in hosts and "*" not in mlflow  # the worker reaches it as mlflow:5000
    assert "--cors-allowed-origins ${MLFLOW_UI_URL:-http://127.0.0.1:5000}" in mlflow


def test_compose_services_reference_each_other_correctly(compose: dict) -> None:
    services = compose["services"]
    for name, service in services.items():
        for dependency in service.get("depends_on", {}):
            assert dependency in services, f"{name} depends on unknown {dependency}"
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):  # a file of the repository, mounted
                assert (DEPLOYMENTS / source).exists(), f"{name}: no file {source}"
            else:
                assert source in compose["volumes"], f"{name}: undeclared volume {source}"
        if build := service.get("build"):
            assert (DEPLOYMENTS / build["context"] / build["dockerfile"]).exists()
    # Every host named in a URL or DSN is a service of this file.
    text = yaml.safe_dump(services)
    hosts = set(re.findall(r"(?:https?://|@)([a-z][a-z0-9-]*):\d+", text)) - {"localhost"}
    assert hosts and hosts <= set(services), hosts - set(services)


def test_compose_locks_the_registry_and_the_workers_log_in(compose: dict) -> None:
    services = compose["services"]
    mlflow = services["mlflow"]
    assert "--app-name basic-auth" in mlflow["command"]
    assert mlflow["environment"]["MLFLOW_AUTH_CONFIG_PATH"] == "/etc/mlflow/mlflow-auth.ini"
    assert "./mlflow-auth.ini:/etc/mlflow/mlflow-auth.ini:ro" in mlflow["volumes"]
    worker = services["gpu-worker"]["environment"]
    assert worker["MLFLOW_TRACKING_USERNAME"].startswith("${MLFLOW_PIPELINE_USERNAME:?")
    assert worker["MLFLOW_TRACKING_PASSWORD"].startswith("${MLFLOW_PIPELINE_PASSWORD:?")
    assert services["gpu-worker"]["depends_on"]["mlflow-users"] == {
        "condition": "service_completed_successfully"
    }


def test_compose_runs_postgres_backed_servers_and_an_s3_artifact_store(compose: dict) -> None:
    services = compose["services"]
    prefect_db = services["prefect-server"]["environment"]["PREFECT_API_DATABASE_CONNECTION_URL"]
    assert prefect_db.startswith("postgresql+asyncpg://")
    mlflow = services["mlflow"]
    assert "--backend-store-uri postgresql://" in mlflow["command"]
    assert "--artifacts-destination s3://" in mlflow["command"]
    assert mlflow["environment"]["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "false"
    assert "MLFLOW_S3_ENDPOINT_URL" in mlflow["environment"]


def test_compose_gpu_worker_reserves_nvidia_gpus_for_the_gpu_pool(compose: dict) -> None:
    worker = compose["services"]["gpu-worker"]
    (device,) = worker["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
    assert f"--pool {Settings().services.gpu_work_pool}" in worker["command"]
    assert worker["environment"]["PREFECT_API_URL"] == "http://prefect-server:4200/api"


def test_gpu_image_puts_the_project_where_the_gpu_deployment_pulls_it(prefect_yaml: dict) -> None:
    dockerfile = (DEPLOYMENTS / "gpu.Dockerfile").read_text()
    (step,) = prefect_yaml["train-gpu"]["pull"]
    directory = step["prefect.deployments.steps.set_working_directory"]["directory"]
    assert f"WORKDIR {directory}" in dockerfile
    assert Path(directory).is_absolute()


def test_up_applies_each_deployment_on_its_declared_pool() -> None:
    from deepsummit.services.supervisor import deployments_by_pool

    pools = deployments_by_pool()
    settings = Settings()
    assert pools["train"] == settings.services.work_pool
    assert pools["train-gpu"] == settings.services.gpu_work_pool
