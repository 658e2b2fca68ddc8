"""The local services' commands (`up`, `down`, `status`) and the main job."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer

from deepsummit.cli.common import (
    AsJson,
    Profile,
    command,
    fail,
    print_json,
    settings_for,
)
from deepsummit.cli.exit_codes import ExitCode
from deepsummit.core.config import Settings
from deepsummit.core.options import RunOptions
from deepsummit.services import local
from deepsummit.services import supervisor as services


@command()
def up(profile: Profile = None) -> None:
    """Start the local Prefect server, MLflow server, worker and the scorer that answers
    `predict` (what runs already is kept), create the work pool and apply the deployments of
    prefect.yaml."""
    settings = settings_for(profile, RunOptions())
    for line in services.up(settings):
        typer.echo(line)
    typer.echo(_render_status(_status_document(settings)))


@command()
def down(profile: Profile = None) -> None:
    """Stop the processes `deepsummit up` started (by their recorded PIDs)."""
    for line in services.down(settings_for(profile, RunOptions())):
        typer.echo(line)


@command()
def status(profile: Profile = None, as_json: AsJson = False) -> None:
    """Where the warehouse, the MLflow registry and the Prefect server are, and what runs.

    A health check: exits 3 (service unavailable) while a service `deepsummit up` manages is
    not healthy."""
    document = _status_document(settings_for(profile, RunOptions()))
    if as_json:
        print_json(document)
    else:
        typer.echo(_render_status(document))
    down = [service["name"] for service in document["services"] if not service["healthy"]]
    if down:
        raise fail(f"not healthy: {', '.join(down)}", ExitCode.SERVICE_UNAVAILABLE)


def _status_document(settings: Settings) -> dict[str, Any]:
    """What `deepsummit status` reports, as data (its --json document)."""
    from sqlalchemy.engine import make_url  # not for every command: 0.3 s to import

    warehouse = settings.paths.warehouse
    backend, artifacts = services.mlflow_store(settings)
    return {
        "warehouse": {
            "path": warehouse,
            "bytes": warehouse.stat().st_size if warehouse.exists() else None,
        },
        "mlflow": {
            "tracking_uri": settings.mlflow.tracking_uri,
            # A PostgreSQL URL holds the cluster's password: shown masked.
            "server_store": make_url(backend).render_as_string(hide_password=True),
            "server_artifacts": artifacts,
        },
        "prefect": {
            "api_url": settings.services.prefect_api_url,
            "home": local.prefect_home(settings),
            "login": local.prefect_login_hint(settings),
        },
        "alerts": services.describe_alerts(settings),
        "service_logs": settings.services.run_dir,
        "services": [
            {**asdict(service), "summary": service.render()}
            for service in services.status(settings)
        ],
    }


def _render_status(document: dict[str, Any]) -> str:
    warehouse, mlflow, prefect = document["warehouse"], document["mlflow"], document["prefect"]
    size = "not created yet" if warehouse["bytes"] is None else f"{warehouse['bytes'] / 1e6:.1f} MB"
    return "\n".join(
        [
            f"warehouse        {warehouse['path']} ({size})",
            f"MLflow registry  {mlflow['tracking_uri']}",
            f"                 server store {mlflow['server_store']}, "
            f"artifacts {mlflow['server_artifacts']}",
            f"Prefect server   {prefect['api_url']} (PREFECT_HOME {prefect['home']})",
            f"Prefect login    {prefect['login']}",
            f"alerts           {document['alerts']}",
            f"service logs     {document['service_logs']}",
            *(service["summary"] for service in document["services"]),
        ]
    )


@command("main-job")
def main_job(
    profile: Profile = None,
    param: Annotated[
        list[str] | None,
        typer.Option(
            help="A parameter of the summit flow, KEY=VALUE with a JSON value (repeatable), "
            """e.g. 'options={"max_train_rows": 5000}'."""
        ),
    ] = None,
    timeout_s: Annotated[
        int, typer.Option(help="Give up watching after this many seconds.")
    ] = 3600,
) -> None:
    """The main job: services up, `prefect deployment run summit/train --watch` on the bundle,
    then where to look (flow run, model version, Data Docs)."""
    settings = settings_for(profile, RunOptions())
    for line in services.up(settings):
        typer.echo(line)
    params = [*(param or []), *([f"profile={profile}"] if profile else [])]
    command = [
        str(Path(sys.executable).parent / "prefect"), "deployment", "run", "summit/train",
        "--watch", "--watch-timeout", str(timeout_s),
        *(arg for p in params for arg in ("--param", p)),
    ]  # fmt: skip
    started = dt.datetime.now()
    flow_run_id = _stream(command, {**os.environ, **services.prefect_env(settings)})
    minutes = (dt.datetime.now() - started).total_seconds() / 60
    ui = local.prefect_ui_url(settings)
    typer.echo("")
    if flow_run_id is None:
        raise fail("could not start summit/train; see the output above", ExitCode.FAILED)
    typer.echo(f"Prefect flow run   {ui}/runs/flow-run/{flow_run_id}  ({minutes:.1f} min)")
    typer.echo(f"Prefect login      {local.prefect_login_hint(settings)}")
    summary_file = settings.paths.runs_dir / flow_run_id / "summary.json"
    if not summary_file.exists():
        typer.echo(f"worker log         {services.log_file(settings, services.WORKER)}")
        raise fail(
            "summit/train did not complete; see the flow run and the worker log", ExitCode.FAILED
        )
    summary = json.loads(summary_file.read_text())
    role = "champion" if summary["champion"] else "challenger"
    typer.echo(
        f"MLflow model       {summary['model_version_url']}  (v{summary['model_version']}, {role})"
    )
    typer.echo(f"MLflow run         {summary['mlflow_run_url']}")
    typer.echo(f"Data Docs          {summary['data_docs']}")
    typer.echo(f"run folder         {summary['run_dir']}")


def _stream(command: list[str], env: dict[str, str]) -> str | None:
    """Run `command`, echoing its output; the flow run id it printed, or None."""
    flow_run_id = None
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            typer.echo(line, nl=False)
            if match := re.search(r"UUID: ([0-9a-f-]{36})", line):
                flow_run_id = match.group(1)
    return flow_run_id
