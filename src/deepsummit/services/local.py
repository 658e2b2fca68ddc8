"""Where the local services live and how to reach them: their names, their files under
`services.run_dir`, the Prefect login, the environments and URLs derived from the settings."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from deepsummit.core.config import Settings
from deepsummit.core.sections import PROJECT_ROOT
from deepsummit.services.prefect_api import PrefectApi
from deepsummit.services.secret_file import ensure_secret

PREFECT_SERVER = "prefect-server"
MLFLOW_SERVER = "mlflow-server"
WORKER = "worker"
SCORER = "scorer"
SERVICE_NAMES = (PREFECT_SERVER, MLFLOW_SERVER, WORKER)  # and the scorer where it is on

PROCESS_JOB_TEMPLATE = PROJECT_ROOT / "deployments" / "process-job-template.json"
PREFECT_YAML = PROJECT_ROOT / "prefect.yaml"

WORKER_NAME = "deepsummit-local"


@dataclass(frozen=True)
class ServiceStatus:
    name: str
    pid: int | None
    running: bool
    healthy: bool
    url: str
    log: Path
    leftover: tuple[int, ...] = ()  # its session's processes alive after its main one died
    answering: bool = False  # something answers at `url` (what really listens)

    def render(self) -> str:
        if not self.running and self.leftover:
            pids = ", ".join(map(str, self.leftover))
            serving = f", still answering at {self.url}" if self.answering else ""
            return (
                f"{self.name:<15} main process DIED; pid {pids} of its group still running"
                f"{serving}; `deepsummit down` stops them"
            )
        if not self.running:
            return f"{self.name:<15} stopped                  {self.url}"
        state = "healthy" if self.healthy else "running, NOT healthy"
        return f"{self.name:<15} {state:<24} {self.url}  (pid {self.pid}, log {self.log})"


def bin_path(name: str) -> str:
    """An executable of this environment (the venv's `prefect`, `mlflow`)."""
    return str(Path(sys.executable).parent / name)


def prefect_home(settings: Settings) -> Path:
    """The server's PREFECT_HOME: its SQLite database is this project's own, not ~/.prefect."""
    return settings.services.run_dir / "prefect-home"


def prefect_auth_file(settings: Settings) -> Path:
    """Where the Prefect server's secret (`user:password`) is kept; `deepsummit status` names it."""
    return settings.services.run_dir / "prefect-auth"


def prefect_auth_string(settings: Settings) -> str | None:
    """The Prefect server's secret, None before the first `up` generated it."""
    path = prefect_auth_file(settings)
    return path.read_text().strip() if path.exists() else None


def ensure_prefect_auth(settings: Settings) -> None:
    """Generate the server's secret once (`deepsummit:<password>`)."""
    ensure_secret(prefect_auth_file(settings), prefix="deepsummit:")


def prefect_ui_url(settings: Settings) -> str:
    """The Prefect UI people browse: the V2 UI, where the server's root leads and where a link
    to a page survives the login (it returns to that page; the V1 UI's deep links do not)."""
    return settings.services.prefect_api_url.removesuffix("/api") + "/v2"


def prefect_login_hint(settings: Settings) -> str:
    """How a person logs in to the Prefect UI: where the secret is, never the secret itself."""
    path = prefect_auth_file(settings)
    if not path.exists():
        return "created by the first `deepsummit up`"
    return f"the UI asks for it: paste the line of {path} (kept there, never printed)"


def prefect_api(settings: Settings) -> PrefectApi:
    """The local Prefect server's REST API, with its secret."""
    return PrefectApi(settings.services.prefect_api_url, prefect_auth_string(settings))


def prefect_env(settings: Settings) -> dict[str, str]:
    """Environment for anything that talks to the local Prefect server."""
    env = {
        "PREFECT_API_URL": settings.services.prefect_api_url,
        # The links Prefect prints (`prefect deployment run`) and sends (alerts) open the V2 UI.
        "PREFECT_UI_URL": prefect_ui_url(settings),
        "PREFECT_HOME": str(prefect_home(settings)),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        # The stages' own log lines (per-epoch metrics, counts) go to the flow run's logs too.
        "PREFECT_LOGGING_EXTRA_LOGGERS": "deepsummit",
    }
    if (auth_string := prefect_auth_string(settings)) is not None:
        env["PREFECT_API_AUTH_STRING"] = auth_string
    return env


def browser_origins(settings: Settings, port: int) -> list[str]:
    """The origins a browser on this machine loads a service's UI from: its host, and
    `localhost` as well when that host is the loopback address."""
    host = settings.services.host
    hosts = [host, "localhost"] if host == "127.0.0.1" else [host]
    return [f"http://{name}:{port}" for name in hosts]


def mlflow_store(settings: Settings) -> tuple[str, Path]:
    """The MLflow server's backend store URI (a SQLite file under var/, or the `mlflow`
    database of the PostgreSQL cluster) and its artifact folder under var/, which the server
    alone writes: clients send and fetch artifacts through it (mlflow-artifacts:/)."""
    artifacts = settings.paths.var_dir / "mlartifacts"
    if settings.services.database == "postgresql":
        from deepsummit.services.postgres import connection_url

        return connection_url(settings, "mlflow"), artifacts
    return f"sqlite:///{settings.paths.var_dir / 'mlflow.db'}", artifacts
