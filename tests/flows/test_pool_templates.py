"""The work pools' base job templates (deployments/*-job-template.json): whoever holds the Prefect
secret may create deployments and flow runs, but may set only the job variables a run needs. The
command, image, mounts, privileges and identity of the job are the pool's.

The server half runs against a real Prefect server: it validates job variables against the pool's
base job template alone, so Docker and Kubernetes pools are created through the API without their
worker packages. The worker half renders each template as its worker does (no Docker engine or
Kubernetes cluster here)."""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
import yaml
from flows_fixtures import migrated_prefect_harness
from prefect.client.orchestration import SyncPrefectClient, get_client
from prefect.client.schemas.actions import DeploymentUpdate, WorkPoolCreate
from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId
from prefect.client.schemas.objects import FlowRun
from prefect.states import Scheduled
from prefect.utilities.templating import apply_values, find_placeholders
from prefect.workers.base import BaseJobConfiguration
from prefect.workers.process import ProcessJobConfiguration, ProcessWorker

from deepsummit.core.config import Settings
from deepsummit.core.sections import PROJECT_ROOT

DEPLOYMENTS = PROJECT_ROOT / "deployments"
# Template → the worker type of the pools created with it.
TEMPLATES = {
    "process-job-template.json": "process",
    "docker-gpu-job-template.json": "docker",
    "kubernetes-gpu-job-template.json": "kubernetes",
}
# The variables a run may set (docs/deployment.md's table says why each): any other is refused.
RUN_VARIABLES = {
    "name", "labels", "env", "stream_output", "gpu_count",  # every pool
    "mem_limit",  # Docker
    "cpu_request", "memory_request", "memory_limit",  # Kubernetes
}  # fmt: skip
# What a deployment or flow run holding the Prefect secret might send to run code of its choosing
# on the worker's host, or to widen what the job may reach. Every pool refuses each.
HOSTILE_JOB_VARIABLES = [
    {"command": "touch /tmp/deepsummit-pwned"},
    {"working_dir": "/tmp"},
    {"env": {"PYTHONSTARTUP": "/tmp/evil.py"}},
    {"env": {"LD_PRELOAD": "/tmp/evil.so"}},
    {"env": {"DEEPSUMMIT_PROFILE": "base", "PATH": "/tmp/evil"}},
    {"env.LD_PRELOAD": "/tmp/evil.so"},  # a worker reads a dotted key as env's
    {"privileged": True},
    {"volumes": ["/:/host"]},
    {"image": "attacker/image:latest"},
    {"networks": ["host"]},
    {"network_mode": "host"},
    {"container_create_kwargs": {"privileged": True}},
    {"service_account_name": "cluster-admin"},
    {"namespace": "kube-system"},
    {"job_manifest": {"spec": {}}},
]
NEVER = datetime(2999, 1, 1, tzinfo=UTC)  # a run scheduled then is never picked up
# The env names a run may send. A Docker or Kubernetes job reads the tracking server and the
# MLflow login from a secret of the pool's (Prefect Secret blocks, a Kubernetes Secret): a run
# naming the tracking server would send that login wherever it chose. The process pool's
# checked worker refuses a tracking server other than its own (checked_worker.py).
ANY_SETTING = "^DEEPSUMMIT_[A-Z0-9_]+$"
NOT_THE_TRACKING_SERVER = "^(?!DEEPSUMMIT_MLFLOW__TRACKING_URI$)DEEPSUMMIT_[A-Z0-9_]+$"
ENV_NAMES = {
    "process-job-template.json": ANY_SETTING,
    "docker-gpu-job-template.json": NOT_THE_TRACKING_SERVER,
    "kubernetes-gpu-job-template.json": NOT_THE_TRACKING_SERVER,
}
GPU_TEMPLATES = [name for name, pattern in ENV_NAMES.items() if pattern != ANY_SETTING]
# What those secrets hold, by the variable a job gets it as: Prefect Secret blocks (Docker),
# keys of the Kubernetes Secret deepsummit-mlflow.
SECRET_BLOCKS = {
    "DEEPSUMMIT_MLFLOW__TRACKING_URI": "deepsummit-mlflow-tracking-uri",
    "MLFLOW_TRACKING_USERNAME": "deepsummit-mlflow-username",
    "MLFLOW_TRACKING_PASSWORD": "deepsummit-mlflow-password",
}
SECRET_KEYS = {
    "DEEPSUMMIT_MLFLOW__TRACKING_URI": "tracking-uri",
    "MLFLOW_TRACKING_USERNAME": "username",
    "MLFLOW_TRACKING_PASSWORD": "password",
}
# What a GPU pool refuses besides: a run naming the tracking server or the login.
NAMING_THE_SECRETS = [
    *({"env": {name: "http://attacker.example:5000"}} for name in SECRET_BLOCKS),
    {"mlflow_tracking_uri": "http://attacker.example:5000"},
    {"mlflow_password": "chosen-by-the-run"},
]
REFUSED = [  # (template, job variables): every pool's refusals, then the GPU pools' own
    pytest.param(template, variables, id=f"{template.split('-')[0]}-{variables}")
    for templates, hostile in (
        (TEMPLATES, HOSTILE_JOB_VARIABLES),
        (GPU_TEMPLATES, NAMING_THE_SECRETS),
    )
    for template in templates
    for variables in hostile
]


def _template(name: str) -> dict[str, Any]:
    return json.loads((DEPLOYMENTS / name).read_text())


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


@pytest.fixture(scope="module")
def client() -> Iterator[SyncPrefectClient]:
    with migrated_prefect_harness(), get_client(sync_client=True) as client:
        yield client


@pytest.fixture(scope="module")
def flow_id(client: SyncPrefectClient) -> uuid.UUID:
    return client.create_flow_from_name("summit")


@pytest.fixture(scope="module")
def pools(client: SyncPrefectClient) -> dict[str, str]:
    """Template → the name of a pool created with it, of its worker's type."""
    names = {}
    for template, worker_type in TEMPLATES.items():
        name = f"locked-{worker_type}"
        client.create_work_pool(
            WorkPoolCreate(name=name, type=worker_type, base_job_template=_template(template))
        )
        names[template] = name
    return names


def _deploy(
    client: SyncPrefectClient, flow_id: uuid.UUID, pool: str, job_variables: dict[str, Any]
) -> uuid.UUID:
    return client.create_deployment(
        flow_id=flow_id,
        name=f"probe-{uuid.uuid4().hex[:8]}",
        work_pool_name=pool,
        job_variables=job_variables,
    )


def _run(
    client: SyncPrefectClient, deployment_id: uuid.UUID, job_variables: dict[str, Any]
) -> FlowRun:
    return client.create_flow_run_from_deployment(
        deployment_id, job_variables=job_variables, state=Scheduled(scheduled_time=NEVER)
    )


def _runs_of(client: SyncPrefectClient, deployment_id: uuid.UUID) -> list[FlowRun]:
    return client.read_flow_runs(
        deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id]))
    )


@pytest.mark.parametrize(("template", "job_variables"), REFUSED)
def test_pool_refuses_a_deployment_or_flow_run_choosing_what_the_job_runs(
    client: SyncPrefectClient,
    flow_id: uuid.UUID,
    pools: dict[str, str],
    template: str,
    job_variables: dict[str, Any],
) -> None:
    deployment_id = _deploy(client, flow_id, pools[template], {})
    attempts = {
        "create a deployment": lambda: _deploy(client, flow_id, pools[template], job_variables),
        "create a flow run": lambda: _run(client, deployment_id, job_variables),
    }
    for attempt, send in attempts.items():
        with pytest.raises(httpx.HTTPStatusError) as refused:
            send()
        assert refused.value.response.status_code == 422, attempt
    # Prefect 3.8.8 stores a deployment update's job variables unchecked (it checks them only
    # when the update names a work pool), but checks them again with each flow run's.
    client.update_deployment(deployment_id, DeploymentUpdate(job_variables=job_variables))
    with pytest.raises(httpx.HTTPStatusError) as refused:
        _run(client, deployment_id, {})
    assert refused.value.response.status_code == 422
    assert _runs_of(client, deployment_id) == []


def _prefect_yaml_job_variables() -> list[dict[str, Any]]:
    """The job variables of prefect.yaml's deployments on the gpu pool."""
    document = yaml.safe_load((PROJECT_ROOT / "prefect.yaml").read_text())
    gpu = Settings().services.gpu_work_pool
    return [
        d["work_pool"].get("job_variables", {})
        for d in document["deployments"]
        if d["work_pool"]["name"] == gpu
    ]


@pytest.mark.parametrize("template", TEMPLATES)
def test_pool_takes_the_gpu_deployments_and_deepsummit_settings(
    client: SyncPrefectClient, flow_id: uuid.UUID, pools: dict[str, str], template: str
) -> None:
    """The gpu deployments apply whichever kind of pool `gpu` is (the compose file's is a
    process pool), and a run may still set DEEPSUMMIT_* settings."""
    declared = _prefect_yaml_job_variables()
    assert declared, "prefect.yaml has no deployment on the gpu pool"
    deployment_ids = [_deploy(client, flow_id, pools[template], v) for v in declared]
    settings = {"env": {"DEEPSUMMIT_TRAIN__MAX_EPOCHS": "1"}, "stream_output": False}
    run = _run(client, deployment_ids[0], settings)
    client.delete_flow_run(run.id)
    assert run.job_variables == settings


@pytest.mark.parametrize("template", TEMPLATES)
def test_template_offers_only_the_variables_a_run_needs(template: str) -> None:
    variables = _template(template)["variables"]
    assert variables["additionalProperties"] is False  # anything unlisted is refused
    # A variable with a `const` is the pool's (the secrets' references): a run may send no other.
    fixed = {name: spec for name, spec in variables["properties"].items() if "const" in spec}
    assert all(spec["default"] == spec["const"] for spec in fixed.values())
    assert set(variables["properties"]) - set(fixed) <= RUN_VARIABLES
    env = variables["properties"]["env"]
    assert env["propertyNames"] == {"pattern": ENV_NAMES[template]}
    referenced = {p.name for p in find_placeholders(_template(template)["job_configuration"])}
    defined = set(variables["properties"])
    assert referenced and referenced <= defined, f"undefined: {referenced - defined}"


# What the server refuses, rendered anyway (a variable stored before the pool was locked would
# reach the worker): the job configuration has no place for any of it. `env` is a variable, which
# the server checks.
SMUGGLED = {k: v for variables in HOSTILE_JOB_VARIABLES for k, v in variables.items() if k != "env"}


def test_process_worker_runs_its_own_command() -> None:
    configuration = ProcessJobConfiguration(**_rendered("process-job-template.json", SMUGGLED))
    configuration.prepare_for_flow_run(FlowRun(id=uuid.uuid4(), flow_id=uuid.uuid4()))
    assert configuration.command == f"{sys.executable} -m prefect.engine"
    assert configuration.working_dir is None


def test_docker_job_runs_the_flow_run_command_in_the_project_image_unprivileged() -> None:
    template = _template("docker-gpu-job-template.json")["job_configuration"]
    fixed = ("command", "image", "privileged", "volumes", "networks")
    assert not find_placeholders({key: template[key] for key in fixed})
    assert "network_mode" not in template  # Docker's default: the bridge network
    rendered = _rendered("docker-gpu-job-template.json", SMUGGLED)
    # The command a worker gives a flow run's container when none is set.
    assert rendered["command"] == BaseJobConfiguration._base_flow_run_command()
    assert rendered["image"] == "deepsummit:gpu"
    assert rendered["privileged"] is False
    assert rendered["volumes"] == [] and rendered["networks"] == []
    # docker-py's DeviceRequest: `docker run --gpus all` is count -1 with capability "gpu".
    assert rendered["container_create_kwargs"] == {
        "device_requests": [{"driver": "nvidia", "count": -1, "capabilities": [["gpu"]]}]
    }


def test_kubernetes_job_runs_the_flow_run_command_in_the_project_image_without_a_token() -> None:
    rendered = _rendered("kubernetes-gpu-job-template.json", SMUGGLED)
    manifest = rendered["job_manifest"]
    pod = manifest["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    # No `command`: the image's entrypoint runs the arguments, which are what the worker would
    # put there itself (prefect-kubernetes: shlex.split(_base_flow_run_command())).
    assert "command" not in container and "command" not in rendered
    assert container["args"] == shlex.split(BaseJobConfiguration._base_flow_run_command())
    assert container["image"] == "deepsummit:gpu"
    assert "serviceAccountName" not in pod and pod["automountServiceAccountToken"] is False
    assert rendered["namespace"] == manifest["metadata"]["namespace"] == "default"
    assert rendered["env"] == {"DEEPSUMMIT_PROFILE": "base", "DEEPSUMMIT_TRAIN__DEVICE": "cuda"}


def test_kubernetes_template_puts_the_gpu_count_in_resource_limits() -> None:
    pod = _rendered("kubernetes-gpu-job-template.json")["job_manifest"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert any(t["key"] == "nvidia.com/gpu" for t in pod["tolerations"])
    raw = _template("kubernetes-gpu-job-template.json")["job_configuration"]["job_manifest"]
    limits = raw["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "{{ gpu_count }}"  # a variable, not a fixed count


@pytest.mark.parametrize("template", TEMPLATES)
def test_up_counts_each_template_as_locked(template: str) -> None:
    from deepsummit.services.supervisor import is_locked

    assert is_locked(_template(template))


def test_up_counts_prefects_default_templates_as_unlocked() -> None:
    """What `prefect worker start` gives a pool it creates: any flow run may set the command."""
    from deepsummit.services.supervisor import is_locked

    default = ProcessWorker.get_default_base_job_template()
    assert "command" in default["variables"]["properties"]
    assert not is_locked(default)


def test_process_template_is_what_the_local_pool_is_created_with() -> None:
    from deepsummit.services.supervisor import PROCESS_JOB_TEMPLATE

    assert PROCESS_JOB_TEMPLATE.name in TEMPLATES
    assert TEMPLATES[PROCESS_JOB_TEMPLATE.name] == "process"


def test_kubernetes_job_reads_the_tracking_server_and_login_from_a_kubernetes_secret() -> None:
    """The manifest's own env list, after which the Kubernetes worker puts the job's `env`
    (prefect-kubernetes' _populate_env_in_manifest): references to the Secret, no value."""
    rendered = _rendered("kubernetes-gpu-job-template.json")
    (container,) = rendered["job_manifest"]["spec"]["template"]["spec"]["containers"]
    assert container["env"] == [
        {"name": name, "valueFrom": {"secretKeyRef": {"name": "deepsummit-mlflow", "key": key}}}
        for name, key in SECRET_KEYS.items()
    ]
    assert not set(SECRET_KEYS) & set(rendered["env"])


def test_docker_job_reads_the_tracking_server_and_login_from_prefect_secret_blocks(
    client: SyncPrefectClient,
) -> None:
    """Rendered as the Docker worker renders it, against the server: the blocks' values, with
    the run's settings beside them."""
    from prefect.blocks.system import Secret

    template = _template("docker-gpu-job-template.json")
    values = {name: f"{name.lower()}-from-the-block" for name in SECRET_BLOCKS}
    for name, block in SECRET_BLOCKS.items():
        Secret(value=values[name]).save(block, overwrite=True)
    run = {"env": {"DEEPSUMMIT_TRAIN__MAX_EPOCHS": "1"}}

    # The worker's own rendering (prefect.workers.base), its client the test server's.
    configuration = asyncio.run(BaseJobConfiguration.from_template_and_values(template, run))
    assert configuration.env == {
        **values,
        "DEEPSUMMIT_PROFILE": "base",
        "DEEPSUMMIT_TRAIN__DEVICE": "cuda",
        "DEEPSUMMIT_TRAIN__MAX_EPOCHS": "1",
    }
    # No value of its own: the blocks' references, which a run may not change.
    blocks = {
        spec["const"] for spec in template["variables"]["properties"].values() if "const" in spec
    }
    assert blocks == {f"{{{{ prefect.blocks.secret.{b} }}}}" for b in SECRET_BLOCKS.values()}
