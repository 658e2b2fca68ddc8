"""A GPU host added as docs/deployment.md says ("Adding a GPU host"), its steps in its order, on
two hosts made on one machine (tests/two_hosts.py): a data host and a training host, each with
a network namespace of its own, joined by a veth pair, each worker in mount, PID and UTS
namespaces of its own besides (tests/remote_worker.py).

The data host runs Prefect (its login, `up`'s command) and MLflow (its basic-auth app, taking
only the Host name DATA_HOST) on its own address, and the data worker. The training host knows
that address by name only (a hosts file bound over its /etc/hosts) and its worker holds what a
real one holds: the two servers' URLs, the two logins and its own copy of the package, from its
environment; nothing of the data host's folders, no loopback shortcut. The chain's hand-over
(tests/flows/test_remote_worker.py's) runs across, with the same assertions, and MLflow refuses
a foreign Host header or a request without the login.
"""

from __future__ import annotations

import http.client
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from flows_fixtures import isolated_paths
from prefect.client.orchestration import SyncPrefectClient, get_client
from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings
from remote_worker import (
    CHECKOUT_STEP,
    WORKER_CODE_STEP,
    Worker,
    basic_authorization,
    can_isolate,
    check_elsewhere,
    check_handed_over,
    create_pool,
    data_worker,
    deploy_probes,
    remote_worker,
    run_all,
)
from services_fixtures import STARTUP_TIMEOUT_S, start_mlflow_auth
from two_hosts import (
    DATA_ADDRESS,
    DATA_HOST,
    NETNS_DIR,
    OUTSIDE_ADDRESS,
    TRAINING_ADDRESS,
    Hosts,
    can_network,
    inside,
    two_hosts,
)

from deepsummit.core.config import Settings, deep_merge, load_settings
from deepsummit.core.sections import PROJECT_ROOT
from deepsummit.services import health, local
from deepsummit.services import supervisor as services

pytestmark = [
    pytest.mark.needs_machine("an isolated worker", can_isolate()),
    pytest.mark.needs_machine("network namespaces", can_network()),
]

DATA_POOL, GPU_POOL = "local", "gpu"
# The defaults: the data host's ports are its own (no other test's server is in its namespace).
PREFECT_PORT, MLFLOW_PORT = 4200, 5000
# What the training host is told, as docs/deployment.md's worker environment file says.
PREFECT_URL = f"http://{DATA_HOST}:{PREFECT_PORT}/api"
MLFLOW_URL = f"http://{DATA_HOST}:{MLFLOW_PORT}"
MLFLOW_NAME = f"{DATA_HOST}:{MLFLOW_PORT}"  # MLFLOW_ALLOWED_HOSTS
ADMIN = ("admin", "admin-password-for-tests")
PIPELINE = ("pipeline", "pipeline-password-for-tests")
SEARCH = "/api/2.0/mlflow/experiments/search?max_results=1"  # any read that needs the login
# What a flow run on either host tries: MLflow by name with its login; the servers' ports on its
# own loopback; an address outside the machine.
URLS = [
    MLFLOW_URL + SEARCH,
    f"http://127.0.0.1:{MLFLOW_PORT}/health",
    f"http://127.0.0.1:{PREFECT_PORT}/api/health",
    f"http://{OUTSIDE_ADDRESS}/",
]


@dataclass
class TwoHosts:
    settings: Settings  # the data host's
    client: SyncPrefectClient
    hosts: Hosts
    data: Worker
    remote: Worker
    data_root: Path
    data_file: Path  # a file of the data side's var/


def _mlflow_status(host: str, login: tuple[str, str] | None, body: Any = None) -> int:
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


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoHosts]:
    data_root = tmp_path_factory.mktemp("data-host")
    remote_root = tmp_path_factory.mktemp("training-host")
    data_file = data_root / "var" / "warehouse.duckdb"
    data_file.parent.mkdir()
    data_file.write_bytes(b"the data side's warehouse")
    address = {"host": DATA_ADDRESS, "prefect_port": PREFECT_PORT, "mlflow_port": MLFLOW_PORT}
    overrides = {"services": address}
    settings = load_settings(overrides=deep_merge(isolated_paths(data_root), overrides))
    with two_hosts(data_root) as hosts, inside(hosts.data):
        try:
            # Step 1: the servers published on the data host's address, with their logins, MLflow
            # taking the name the GPU host uses alone (both started at once: seconds each).
            local.ensure_prefect_auth(settings)
            services.start_process(
                settings,
                services.PREFECT_SERVER,
                services._prefect_server_command(settings),
                services._server_env(settings),
            )
            start_mlflow_auth(settings, data_root, ADMIN, [MLFLOW_NAME])
            for name, check in ((services.PREFECT_SERVER, health.prefect_healthy),
                                (services.MLFLOW_SERVER, health.mlflow_healthy)):  # fmt: skip
                health.wait_healthy(settings, name, check, STARTUP_TIMEOUT_S)
            # Step 2: the pipeline's MLflow login, as the compose file's mlflow-users job makes it.
            user = {"username": PIPELINE[0], "password": PIPELINE[1]}
            assert _mlflow_status(MLFLOW_NAME, ADMIN, user) == 200
            auth = local.prefect_auth_string(settings)
            assert auth is not None
            with (
                temporary_settings(
                    {
                        PREFECT_API_URL: settings.services.prefect_api_url,
                        PREFECT_API_AUTH_STRING: auth,
                    }
                ),
                get_client(sync_client=True) as client,
            ):
                yield from _workers(settings, client, hosts, auth, remote_root, data_file)
        finally:
            services.down(settings)


def _workers(
    settings: Settings,
    client: SyncPrefectClient,
    hosts: Hosts,
    auth: str,
    remote_root: Path,
    data_file: Path,
) -> Iterator[TwoHosts]:
    """The data host's worker (the compose file's data-worker) and the GPU host's, from step 3."""
    data_root = settings.paths.var_dir.parent
    # Step 3: the data host's name in the GPU host's /etc/hosts (hosts.training.hosts, bound by
    # remote_worker); step 4: the package on it (remote_worker's code copy); step 5: its
    # environment: the servers' URLs and the two logins, and paths of its own alone.
    prefect = {"PREFECT_API_URL": PREFECT_URL, "PREFECT_API_AUTH_STRING": auth}
    logins = {"MLFLOW_TRACKING_USERNAME": PIPELINE[0], "MLFLOW_TRACKING_PASSWORD": PIPELINE[1]}
    tracking = {"mlflow": {"tracking_uri": MLFLOW_URL}}
    # Step 6: the pools, locked with the shipped template.
    for pool in (DATA_POOL, GPU_POOL):
        create_pool(client, pool)
    # Step 7: the workers, online.
    with (
        data_worker(
            DATA_POOL,
            prefect,
            deep_merge(isolated_paths(data_root), tracking),
            [remote_root],
            data_root / "worker.log",
            network=hosts.data,
        ) as data,
        remote_worker(
            GPU_POOL, remote_root, prefect | logins, tracking, [data_root], network=hosts.training
        ) as remote,
    ):
        for worker in (data, remote):
            worker.wait_online(client)
        print(f"online after {data.started_s:.1f} s (data), {remote.started_s:.1f} s (training)")
        # Step 8: the deployments. The GPU one names the tracking server as the GPU host knows
        # it, which the checked worker takes: its own.
        deploy_probes(client, DATA_POOL, CHECKOUT_STEP)
        named = {"env": {"DEEPSUMMIT_MLFLOW__TRACKING_URI": MLFLOW_URL}}
        deploy_probes(client, GPU_POOL, WORKER_CODE_STEP, named)
        yield TwoHosts(settings, client, hosts, data, remote, data_root, data_file)


def test_mlflow_refuses_a_foreign_host_or_no_login_and_prefect_no_login(two: TwoHosts) -> None:
    """Step 9's checks, from the GPU host's network: MLflow answers its name with the login
    only; Prefect the login only."""
    with inside(two.hosts.training):
        assert _mlflow_status(MLFLOW_NAME, PIPELINE) == 200
        assert _mlflow_status(MLFLOW_NAME, None) == 401
        # A Host header it was not told to take: another name, or the bare address.
        for foreign in ("attacker.example:5000", f"{DATA_ADDRESS}:{MLFLOW_PORT}", "localhost:5000"):
            assert _mlflow_status(foreign, PIPELINE) == 403, foreign
        # Prefect: a request without the login refused (401), one with it taken; else it raises.
        health.check_prefect_auth(two.settings)
    log = services.log_file(two.settings, services.MLFLOW_SERVER).read_text()
    assert re.search(rf"{re.escape(TRAINING_ADDRESS)}:\d+ - \"GET {re.escape(SEARCH)} \S+ 401", log)


def test_the_chain_hands_over_to_the_training_host_by_name_alone(two: TwoHosts) -> None:
    """Step 9's run: the chain's hand-over, started on the data host, runs its child on the
    GPU host."""
    paths = [str(two.data_file), str(PROJECT_ROOT / "pyproject.toml")]
    child = f"where-am-i/{GPU_POOL}"
    (parent,) = run_all(
        two.client, (f"hand-over/{DATA_POOL}", {"deployment": child, "paths": paths, "urls": URLS})
    )

    here = parent["here"]
    assert here["hostname"] == two.data.hostname and set(here["reads"].values()) == {"read"}
    facts = check_handed_over(two.client, parent, two.remote)
    check_elsewhere(facts, two.remote, paths)
    # It reached MLflow by name with the login of its environment; nothing of the data host
    # answers on its loopback, and no route leads off the machine.
    assert facts["reaches"] == {
        URLS[0]: "200",
        URLS[1]: "ECONNREFUSED",
        URLS[2]: "ECONNREFUSED",
        URLS[3]: "ENETUNREACH",
    }
    # The server saw it come from the training host's address.
    log = services.log_file(two.settings, services.MLFLOW_SERVER).read_text()
    assert re.search(rf'{re.escape(TRAINING_ADDRESS)}:\d+ - "GET {re.escape(SEARCH)} \S+ 200', log)
    # All it was told: the servers by name and the two logins; no folder of the data host.
    environment = facts["environment"]
    assert environment["PREFECT_API_URL"] == PREFECT_URL
    assert environment["DEEPSUMMIT_MLFLOW__TRACKING_URI"] == MLFLOW_URL
    assert facts["logins"] == [
        "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_USERNAME", "PREFECT_API_AUTH_STRING"
    ]  # fmt: skip
    told = " ".join(environment.values())
    assert str(two.data_root) not in told and str(PROJECT_ROOT) not in told
    assert DATA_ADDRESS not in told and "127.0.0.1" not in told


def test_the_hosts_are_gone_after_a_failure(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="a test failed"), two_hosts(tmp_path) as hosts:
        assert (NETNS_DIR / hosts.training.namespace).exists()
        raise RuntimeError("a test failed")
    assert not (NETNS_DIR / hosts.data.namespace).exists()
    assert not (NETNS_DIR / hosts.training.namespace).exists()
