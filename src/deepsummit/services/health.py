"""Whether the services answer: HTTP health checks, ports, the Prefect login."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable

from deepsummit.core.config import Settings
from deepsummit.core.errors import ServiceError
from deepsummit.core.http_retry import send
from deepsummit.serve.scorer_client import HEALTH_PATH
from deepsummit.services.local import (
    PREFECT_SERVER,
    WORKER_NAME,
    prefect_api,
    prefect_auth_file,
)
from deepsummit.services.prefect_api import PrefectApi
from deepsummit.services.processes import log_file, recorded_pid


def http_ok(url: str, timeout_s: float = 2.0) -> bool:
    """`url` answers 2xx, once a busy server's transient answers are over; False when it
    refuses, nothing answers, or the transient answers go on."""
    try:
        status, _ = send(urllib.request.Request(url), timeout_s)
    except (urllib.error.URLError, OSError, ValueError):
        return False
    return 200 <= status < 300


def port_in_use(host: str, port: int) -> bool:
    """Something listens on host:port. A port nobody listens on refuses at once; the timeout
    is for a listener on a machine whose cores are all busy, where even a loopback handshake
    has taken over half a second (a test that held the port saw it free)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(5.0)
        return sock.connect_ex((host, port)) == 0


def prefect_healthy(settings: Settings) -> bool:
    return http_ok(f"{settings.services.prefect_api_url}/health")


def mlflow_healthy(settings: Settings) -> bool:
    return http_ok(f"{settings.services.mlflow_url}/health")


def scorer_healthy(settings: Settings) -> bool:
    return http_ok(settings.services.scorer_url + HEALTH_PATH)


def worker_healthy(settings: Settings) -> bool:
    """The server lists our worker as ONLINE in the work pool (its heartbeats are recent)."""
    path = f"/work_pools/{settings.services.work_pool}/workers/filter"
    try:
        workers = prefect_api(settings).post(path, {}, timeout_s=2.0)
    except (urllib.error.URLError, OSError, ValueError):
        return False
    return any(w["name"] == WORKER_NAME and w["status"] == "ONLINE" for w in workers)


def _refuses(api: PrefectApi) -> bool:
    """True when the server answers 401 to `api`'s credentials."""
    try:
        api.get("/admin/version")
    except urllib.error.HTTPError as error:
        if error.code == 401:
            return True
        raise ServiceError(f"{PREFECT_SERVER}: /admin/version answered {error.code}") from None
    return False


def check_prefect_auth(settings: Settings) -> None:
    """The running server refuses a request without the secret and takes ours: a server
    started before auth was on, or with another secret, is never silently used."""
    restart = "run `deepsummit down`, then `deepsummit up`"
    if not _refuses(PrefectApi(settings.services.prefect_api_url, None)):
        raise ServiceError(
            f"{PREFECT_SERVER} answers without credentials (started before auth was on); {restart}"
        )
    if _refuses(prefect_api(settings)):
        raise ServiceError(
            f"{PREFECT_SERVER} refuses the secret in {prefect_auth_file(settings)}; {restart}"
        )


def wait_healthy(
    settings: Settings, name: str, check: Callable[[Settings], bool], timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check(settings):
            return
        if recorded_pid(settings, name) is None:
            raise ServiceError(f"{name} exited while starting; see {log_file(settings, name)}")
        time.sleep(0.5)
    raise ServiceError(
        f"{name} not healthy after {timeout_s:.0f} s; see {log_file(settings, name)}"
    )
