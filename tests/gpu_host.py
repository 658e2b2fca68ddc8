"""A GPU host added as docs/deployment.md says ("Adding a GPU host"), steps 1 to 7, on the two
hosts of tests/two_hosts.py: the data host's servers on its own address with their logins, the
data host's worker, and the GPU host's worker reaching the servers by name with the logins alone.

For tests/flows/test_two_hosts.py (its probe flows) and bench/two_workers.py --hosts (the real
chain). `gpu_host_added` makes the two hosts and keeps the calling thread in the data host's
network while the block runs; everything is stopped and removed afterwards, whatever happened.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect.client.orchestration import SyncPrefectClient, get_client
from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings
from remote_worker import Worker, basic_authorization, create_pool, data_worker, remote_worker
from services_fixtures import STARTUP_TIMEOUT_S, start_mlflow_auth
from two_hosts import DATA_ADDRESS, DATA_HOST, Hosts, inside, two_hosts

from deepsummit.core.config import Settings, deep_merge, load_settings
from deepsummit.services import health, local
from deepsummit.services import supervisor as services

DATA_POOL, GPU_POOL = "local", "gpu"
# The defaults: the data host's ports are its own (no other server is in its namespace).
PREFECT_PORT, MLFLOW_PORT = 4200, 5000
# What the training host is told, as docs/deployment.md's worker environment file says.
PREFECT_URL = f"http://{DATA_HOST}:{PREFECT_PORT}/api"
MLFLOW_URL = f"http://{DATA_HOST}:{MLFLOW_PORT}"
MLFLOW_NAME = f"{DATA_HOST}:{MLFLOW_PORT}"  # MLFLOW_ALLOWED_HOSTS
ADMIN = ("admin", "admin-password-for-tests")
PIPELINE = ("pipeline", "pipeline-password-for-tests")
SEARCH = "/api/2.0/mlflow/experiments/search?max_results=1"  # any read that needs the login
# The data host's settings: its servers on its own address, the registry by the name both
# hosts' workers know it by.
DATA_HOST_SETTINGS: dict[str, Any] = {
    "services": {"host": DATA_ADDRESS, "prefect_port": PREFECT_PORT, "mlflow_port": MLFLOW_PORT},
    "mlflow": {"tracking_uri": MLFLOW_URL},
}


@dataclass
class GpuHostAdded:
    settings: Settings  # the data host's
    client: SyncPrefectClient  # the data host's Prefect server, with its login
    hosts: Hosts
    data: Worker
    remote: Worker


def mlflow_status(host: str, login: tuple[str, str] | None, body: Any = None) -> int:
    """The status MLflow answers a request for `SEARCH` (or a user's creation, with `body`) sent
    to the data host's address with the Host header `host` and `login`, from the network the
    calling thread is in."""
    headers = {"Host": host, "Content-Type": "application/json"}
    if login:
        headers["Authorization"] = basic_authorization(*login)
    path, method = (SEARCH, "GET") if body is None else ("/api/2.0/mlflow/users/create", "POST")
    connection = http.client.HTTPConnection(DATA_ADDRESS, MLFLOW_PORT, timeout=10)
    try:
        connection.request(method, path, json.dumps(body) if body else None, headers)
        return connection.getresponse().status
    finally:
        connection.close()


@contextmanager
def gpu_host_added(
    overrides: dict[str, Any], remote_root: Path, env: dict[str, str] | None = None
) -> Iterator[GpuHostAdded]:
    """Steps 1 to 7 on two hosts made in the data host's folder (its settings' var/'s parent):
    the data host's settings are `overrides` with DATA_HOST_SETTINGS, the GPU host's folder is
    `remote_root`, `env` goes to both workers' environments besides. The calling thread is in
    the data host's network meanwhile."""
    settings = load_settings(overrides=deep_merge(overrides, DATA_HOST_SETTINGS))
    data_root = settings.paths.var_dir.parent
    with two_hosts(data_root) as hosts, inside(hosts.data), _servers(settings) as (auth, client):
        # Step 3: the data host's name in the GPU host's /etc/hosts (hosts.training.hosts, bound
        # by remote_worker); step 4: the package on it (remote_worker's code copy); step 5: its
        # environment: the servers' URLs and the two logins, and paths of its own alone.
        prefect = {"PREFECT_API_URL": PREFECT_URL, "PREFECT_API_AUTH_STRING": auth, **(env or {})}
        logins = {"MLFLOW_TRACKING_USERNAME": PIPELINE[0], "MLFLOW_TRACKING_PASSWORD": PIPELINE[1]}
        tracking = {"mlflow": {"tracking_uri": MLFLOW_URL}}
        # Step 6: the pools, locked with the shipped template.
        for pool in (DATA_POOL, GPU_POOL):
            create_pool(client, pool)
        # Step 7: the workers, online: the data host's as the compose file's data-worker (the
        # servers by name too, with the logins), the GPU host's.
        with (
            data_worker(
                DATA_POOL,
                prefect | logins,
                deep_merge(overrides, tracking),
                [remote_root],
                data_root / "worker.log",
                network=hosts.data,
            ) as data,
            remote_worker(
                GPU_POOL, remote_root, prefect | logins, tracking, [data_root],
                network=hosts.training,
            ) as remote,
        ):  # fmt: skip
            for worker in (data, remote):
                worker.wait_online(client)
            yield GpuHostAdded(settings, client, hosts, data, remote)


@contextmanager
def _servers(settings: Settings) -> Iterator[tuple[str, SyncPrefectClient]]:
    """Steps 1 and 2, from the data host's network: the servers on its address with their
    logins, MLflow taking the name the GPU host uses alone, and the pipeline's MLflow login;
    the Prefect login and a client with it. Both servers stopped afterwards."""
    data_root = settings.paths.var_dir.parent
    try:
        # Both started at once: seconds each.
        local.ensure_prefect_auth(settings)
        services.start_service(settings, services.PREFECT_SERVER)
        start_mlflow_auth(settings, data_root, ADMIN, [MLFLOW_NAME])
        for name, check in ((services.PREFECT_SERVER, health.prefect_healthy),
                            (services.MLFLOW_SERVER, health.mlflow_healthy)):  # fmt: skip
            health.wait_healthy(settings, name, check, STARTUP_TIMEOUT_S)
        # Step 2: the pipeline's MLflow login, as the compose file's mlflow-users job makes it.
        user = {"username": PIPELINE[0], "password": PIPELINE[1]}
        assert mlflow_status(MLFLOW_NAME, ADMIN, user) == 200
        auth = local.prefect_auth_string(settings)
        assert auth is not None
        login = {PREFECT_API_URL: settings.services.prefect_api_url, PREFECT_API_AUTH_STRING: auth}
        with temporary_settings(login), get_client(sync_client=True) as client:
            yield auth, client
    finally:
        services.down(settings)
