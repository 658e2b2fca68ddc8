"""prefect.yaml and the compose file of deployments/: what cannot run here (no Docker engine) is
parsed and validated with Prefect's own models. The job templates: test_pool_templates.py."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import pytest
import yaml
from prefect.cli.deploy._models import PrefectYamlModel

from deepsummit.core.config import Settings, load_settings
from deepsummit.core.sections import PROJECT_ROOT

DEPLOYMENTS = PROJECT_ROOT / "deployments"


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


def test_base_variant_builds_here_and_trains_on_the_gpu_pool(prefect_yaml: dict) -> None:
    base = prefect_yaml["train-base"]
    assert base["entrypoint"] == prefect_yaml["train"]["entrypoint"]
    # The chain stays with the one warehouse; its training goes to the gpu pool.
    assert base["work_pool"]["name"] == Settings().services.work_pool
    assert base["parameters"]["profile"] == "base"
    deployment = load_settings("base").train.deployment
    assert prefect_yaml[deployment.split("/")[1]]["work_pool"]["name"] == "gpu"
    assert base["concurrency_limit"]["limit"] == 1
    # One nightly training per machine: the base schedule exists but starts paused.
    assert [s["cron"] for s in base["schedules"]] == ["0 2 * * *"]
    assert base["schedules"][0]["active"] is False


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOYMENTS / "docker-compose.yml").read_text())


# Compose's interpolation: ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?error},
# ${NAME?error}; `$$` is a literal `$` (a variable of the container's shell).
COMPOSE_VARIABLE = re.compile(r"(?<!\$)\$\{(\w+)(?:(:?[-?])([^}]*))?\}")
# Addresses, not secrets (where the ports are published, the Host names MLflow takes, the UIs'
# addresses): these alone may fall back to a default.
COMPOSE_ADDRESSES = {
    "PREFECT_UI_URL", "MLFLOW_UI_URL", "PUBLISH_ADDRESS", "PREFECT_PUBLISHED_PORT",
    "MLFLOW_PUBLISHED_PORT", "MINIO_CONSOLE_PUBLISHED_PORT", "MLFLOW_ALLOWED_HOSTS",
}  # fmt: skip


def _interpolate(text: str, env: dict[str, str]) -> str:
    def value(match: re.Match) -> str:
        name, operator, argument = match.groups()
        if name in env and (env[name] or not (operator or "").startswith(":")):
            return env[name]
        if operator and operator.endswith("?"):
            raise KeyError(f"{name}: {argument}")
        return argument if operator else ""

    return COMPOSE_VARIABLE.sub(value, text).replace("$$", "$")


def _env_example() -> dict[str, str]:
    """deployments/.env.example's variables and values."""
    lines = (DEPLOYMENTS / ".env.example").read_text().splitlines()
    pairs = (line.split("=", 1) for line in lines if line.strip() and not line.startswith("#"))
    return {name: value for name, value in pairs}


def _rendered(addresses: dict[str, str]) -> dict[str, Any]:
    """The compose file as compose reads it with deployments/.env giving `addresses` (and a
    placeholder for each secret)."""
    text = (DEPLOYMENTS / "docker-compose.yml").read_text()
    secrets = {name for name, _, _ in COMPOSE_VARIABLE.findall(text)} - COMPOSE_ADDRESSES
    return yaml.safe_load(_interpolate(text, {name: f"<{name}>" for name in secrets} | addresses))


def _allowed_hosts(rendered: dict[str, Any]) -> list[str]:
    command = rendered["services"]["mlflow"]["command"]
    return re.search(r"--allowed-hosts (\S+)", command).group(1).split(",")


def test_env_example_lists_every_variable_its_secrets_blank_its_addresses_the_defaults() -> None:
    text = (DEPLOYMENTS / "docker-compose.yml").read_text()
    example = _env_example()
    references = COMPOSE_VARIABLE.findall(text)
    assert set(example) == {name for name, _, _ in references}
    for name, _, default in references:
        assert example[name] == (default if name in COMPOSE_ADDRESSES else ""), name
    addresses = {name: value for name, value in example.items() if name in COMPOSE_ADDRESSES}
    assert _rendered(addresses) == _rendered({})  # the example's values are today's behaviour


def test_compose_publishes_on_loopback_unless_env_names_an_address() -> None:
    def published(rendered: dict[str, Any]) -> dict[str, list[str]]:
        services = rendered["services"]
        return {name: s["ports"] for name, s in services.items() if "ports" in s}

    assert published(_rendered({})) == {
        "prefect-server": ["127.0.0.1:4200:4200"],
        "mlflow": ["127.0.0.1:5000:5000"],
        "minio": ["127.0.0.1:9001:9001"],
    }
    elsewhere = {"PUBLISH_ADDRESS": "10.0.0.5", "MLFLOW_PUBLISHED_PORT": "5005"}
    assert published(_rendered(elsewhere)) == {
        "prefect-server": ["10.0.0.5:4200:4200"],
        "mlflow": ["10.0.0.5:5005:5000"],
        "minio": ["127.0.0.1:9001:9001"],  # the console stays on the loopback
    }


def test_compose_mlflow_takes_its_workers_name_and_the_hosts_env_names() -> None:
    assert _allowed_hosts(_rendered({})) == ["mlflow:5000", "127.0.0.1:5000", "localhost:5000"]
    across = {"MLFLOW_ALLOWED_HOSTS": "deepsummit-data:5000"}  # docs/deployment.md's GPU host
    assert _allowed_hosts(_rendered(across)) == ["mlflow:5000", "deepsummit-data:5000"]


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


def test_compose_prefect_requires_the_login_and_csrf_and_its_own_origin(compose: dict) -> None:
    services = compose["services"]
    server = services["prefect-server"]["environment"]
    assert server["PREFECT_SERVER_API_AUTH_STRING"].startswith("${PREFECT_AUTH_STRING:?")
    assert server["PREFECT_SERVER_CSRF_PROTECTION_ENABLED"] == "true"
    assert server["PREFECT_SERVER_CORS_ALLOWED_ORIGINS"] == server["PREFECT_UI_URL"]
    assert "*" not in server["PREFECT_SERVER_CORS_ALLOWED_ORIGINS"]
    for worker in _workers(compose).values():
        environment = worker["environment"]
        assert environment["PREFECT_API_AUTH_STRING"] == server["PREFECT_SERVER_API_AUTH_STRING"]
    mlflow = services["mlflow"]["command"]
    assert "*" not in mlflow
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
    for worker in _workers(compose).values():
        environment = worker["environment"]
        assert environment["MLFLOW_TRACKING_USERNAME"].startswith("${MLFLOW_PIPELINE_USERNAME:?")
        assert environment["MLFLOW_TRACKING_PASSWORD"].startswith("${MLFLOW_PIPELINE_PASSWORD:?")
        assert worker["depends_on"]["mlflow-users"] == {
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


WORKER_START = "&& exec python -m deepsummit.services.checked_worker"
POOL_CREATE = re.compile(
    r"prefect --no-prompt work-pool create (?P<pool>\S+) --type (?P<type>\S+)"
    r" --base-job-template (?P<template>\S+) --overwrite"
)


def _workers(compose: dict) -> dict[str, dict[str, Any]]:
    """Work pool → the compose service that runs its worker."""
    workers = {}
    for service in compose["services"].values():
        command = str(service.get("command", ""))
        if WORKER_START in command:
            workers[re.search(r"--pool (\S+)", command).group(1)] = service
    return workers


def test_compose_runs_a_worker_for_each_pool_of_the_deployments(compose: dict) -> None:
    from deepsummit.services.supervisor import deployments_by_pool

    workers = _workers(compose)
    assert set(workers) == set(deployments_by_pool().values())
    for worker in workers.values():
        assert worker["environment"]["PREFECT_API_URL"] == "http://prefect-server:4200/api"
    # One warehouse, the data worker's: the GPU worker gets everything by URI, no volume.
    assert workers["local"]["volumes"] == ["warehouse:/opt/deepsummit/var"]
    assert "volumes" not in workers["gpu"]


def test_compose_workers_create_their_pool_with_the_locked_template_first(compose: dict) -> None:
    """A worker that finds no pool creates one with Prefect's default template, whose `command`
    a flow run may set: each worker (re)creates its pool with the local pool's template first,
    the one test_pool_templates.py checks against a server."""
    from deepsummit.services.supervisor import PROCESS_JOB_TEMPLATE

    for pool, worker in _workers(compose).items():
        create, started, start = worker["command"].partition(WORKER_START)
        assert started, f"{pool}: the worker starts before its pool is created"
        created = POOL_CREATE.fullmatch(create.strip().removeprefix('sh -c "'))
        assert created, f"{pool}: {create!r} creates no pool with a template"
        assert created["pool"] == pool and created["type"] == "process"
        assert start.strip().startswith(f"--pool {pool} ")
        # The path inside the image: gpu.Dockerfile copies deployments/ into its WORKDIR.
        assert created["template"] == str(PROCESS_JOB_TEMPLATE.relative_to(PROJECT_ROOT))
    dockerfile = (DEPLOYMENTS / "gpu.Dockerfile").read_text()
    assert "COPY deployments deployments" in dockerfile


def test_compose_gpu_worker_alone_reserves_nvidia_gpus(compose: dict) -> None:
    settings = Settings().services
    workers = _workers(compose)
    (device,) = workers[settings.gpu_work_pool]["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
    assert "deploy" not in workers[settings.work_pool]


def test_gpu_deployments_run_the_workers_own_installed_package(prefect_yaml: dict) -> None:
    """A GPU worker is another machine: its runs import the package installed there, and find
    the project folder by the image's DEEPSUMMIT_PROJECT_DIR, never a folder of the deployer."""
    import importlib

    dockerfile = (DEPLOYMENTS / "gpu.Dockerfile").read_text()
    for name in ("gpu", "trial-gpu"):
        deployment = prefect_yaml[name]
        assert deployment["pull"] == [] and "/" not in deployment["entrypoint"]
        module, function = deployment["entrypoint"].rsplit(".", 1)
        assert hasattr(importlib.import_module(module), function)
    assert "pip install --no-cache-dir -e ." in dockerfile
    [directory] = re.findall(r"DEEPSUMMIT_PROJECT_DIR=(\S+)", dockerfile)
    assert f"WORKDIR {directory}" in dockerfile


def test_up_applies_each_deployment_on_its_declared_pool() -> None:
    from deepsummit.services.supervisor import deployments_by_pool

    pools = deployments_by_pool()
    settings = Settings()
    assert pools["train"] == settings.services.work_pool
    assert pools["gpu"] == settings.services.gpu_work_pool


@pytest.mark.parametrize("module", ["deepsummit.flows.training", "deepsummit.flows.trial"])
def test_a_training_flow_run_starts_without_the_weather_stack(module: str) -> None:
    """A GPU worker's flow run imports its entrypoint before anything else: Pandera, pandas
    and the Open-Meteo client (0.6 s of each start) belong to the data stages, not to it."""
    code = f"import sys, {module}; print(*sorted(sys.modules))"
    imported = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout.split()
    weather_stack = {"pandera", "pandas", "openmeteo_requests", "deepsummit.weather.stage"}
    assert weather_stack.isdisjoint(imported)
