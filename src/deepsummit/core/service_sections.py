"""The sections of the local services `deepsummit up` starts: the Prefect and MLflow servers,
the worker, the scorer and their database, and the alerts the Prefect server sends
(deepsummit/core/sections.py holds the others and what a section is)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from deepsummit.core.sections import ProjectPath, Section, is_url


class ServicesConfig(Section):
    host: str = "127.0.0.1"
    prefect_port: int = 4200
    mlflow_port: int = 5000
    work_pool: str = "local"
    gpu_work_pool: str = "gpu"
    # How often the local worker asks the server for runs to start: a deployment run waits up
    # to this long before it starts (Prefect's own default is 10 s).
    worker_query_s: float = Field(5.0, gt=0)
    # How long the Prefect server keeps a run's slot (the warehouse's, the champion gate's)
    # once its holder stops renewing it: the run renews it every 3/4 of this, so a run killed
    # with its machine frees the slot this long after. Prefect's server takes 60 s at least.
    slot_lease_s: float = Field(300.0, ge=60, le=86_400)
    run_dir: ProjectPath = Path("var/services")
    # The Prefect server's database and MLflow's backend store: SQLite files under var/, or a
    # PostgreSQL cluster `deepsummit up` starts on postgres_port (deepsummit/services/postgres.py),
    # as in production.
    database: Literal["sqlite", "postgresql"] = "sqlite"
    postgres_port: int = 5442  # not 5432, where a packaged cluster of the host may listen
    # `up` also starts the scorer: a process that keeps PyTorch and the champion loaded and
    # answers `deepsummit predict` (deepsummit/serve/scorer.py), which then imports neither.
    scorer: bool = True
    scorer_port: int = 5010
    # The scorer answers on this many threads (a request is milliseconds of one core; the
    # threads are there so that a client slow to send holds one of them, not every request).
    scorer_threads: int = Field(8, ge=1, le=256)
    # ... in this many processes, each with its threads (they share one interpreter, so the
    # threads of one process get about one core): None, one for each core this process may use.
    scorer_processes: int | None = Field(None, ge=1, le=256)
    # Connections accepted and waiting for a thread: one more is answered 503 at once (the
    # asker answers itself) rather than left to wait behind a backlog.
    scorer_queue: int = Field(64, ge=1, le=4096)
    # How long a client has to send its whole request, headers and body, from when a thread
    # takes it up: a local asker sends it in microseconds; one that has not is answered 408.
    scorer_read_deadline_s: float = Field(5.0, gt=0, le=60)
    # A request's body: a planned attempt is a few hundred bytes; a longer one is answered 413
    # without being read.
    scorer_max_body_bytes: int = Field(65_536, ge=1024)

    @property
    def answering_processes(self) -> int:
        """How many processes the scorer answers in (`scorer_processes`, else the cores)."""
        return self.scorer_processes or len(os.sched_getaffinity(0))

    @property
    def prefect_api_url(self) -> str:
        return f"http://{self.host}:{self.prefect_port}/api"

    @property
    def mlflow_url(self) -> str:
        return f"http://{self.host}:{self.mlflow_port}"

    @property
    def scorer_url(self) -> str:
        return f"http://{self.host}:{self.scorer_port}"


class AlertsConfig(Section):
    """Notifications of failed runs, sent by the Prefect server (deepsummit/services/alerts.py)."""

    # Where a Failed or Crashed summit / summit-trial run is reported: a URL taking a JSON POST
    # {"text": …} (a Slack incoming webhook, Mattermost, Google Chat, your own endpoint).
    # None = no alerts. `deepsummit up` applies a change.
    webhook_url: str | None = None

    @model_validator(mode="after")
    def _http_url(self) -> AlertsConfig:
        if self.webhook_url is not None and not is_url(self.webhook_url):
            # Not repeated in the message: a webhook URL is a secret.
            raise ValueError("webhook_url is not an http(s) URL")
        return self
