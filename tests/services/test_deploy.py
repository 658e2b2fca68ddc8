"""`deploy` (run by `up`) against the session's servers: the deployments of a pool that someone
else created go on it only where its job template is locked."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from prefect.workers.process import ProcessWorker
from services_fixtures import RunningServices

from deepsummit.services import supervisor as services
from deepsummit.services.prefect_api import PrefectApi

pytest_plugins = ["services_fixtures"]


def _names_on(pool: str) -> list[str]:
    return [name for name, on in services.deployments_by_pool().items() if on == pool]


@pytest.fixture
def gpu_pool(services_stack: RunningServices) -> Iterator[str]:
    """The gpu pool, created with Prefect's default process template (as `prefect worker start
    --pool gpu` creates a missing pool); it and its deployments are removed afterwards, leaving
    the shared servers as they were."""
    settings = services_stack.settings
    pool = settings.services.gpu_work_pool
    api = services.prefect_api(settings)
    default = ProcessWorker.get_default_base_job_template()
    api.post("/work_pools/", {"name": pool, "type": "process", "base_job_template": default})
    yield pool
    for deployment in _deployed_on(api, pool):
        api.request("DELETE", f"/deployments/{deployment['id']}")
    api.request("DELETE", f"/work_pools/{pool}")


def _deployed_on(api: PrefectApi, pool: str) -> list[dict[str, Any]]:
    return api.post("/deployments/filter", {"work_pools": {"name": {"any_": [pool]}}})


def test_deploy_applies_a_pools_deployments_only_once_its_template_is_locked(
    services_stack: RunningServices, gpu_pool: str
) -> None:
    settings = services_stack.settings
    api = services.prefect_api(settings)
    held_back = _names_on(gpu_pool)
    assert held_back, "prefect.yaml has no deployment on the gpu pool"

    lines = services.deploy(settings)
    (refusal,) = [line for line in lines if line.startswith(f"work pool {gpu_pool!r}")]
    assert all(name in refusal for name in held_back) and "lets a flow run choose" in refusal
    applied = lines[0].removeprefix("deployments applied: ").split(", ")
    assert not set(held_back) & set(applied), applied
    assert _deployed_on(api, gpu_pool) == []

    locked = json.loads(services.PROCESS_JOB_TEMPLATE.read_text())
    api.request("PATCH", f"/work_pools/{gpu_pool}", {"base_job_template": locked})
    lines = services.deploy(settings)
    assert not any(line.startswith(f"work pool {gpu_pool!r}") for line in lines)
    assert sorted(d["name"] for d in _deployed_on(api, gpu_pool)) == sorted(held_back)
