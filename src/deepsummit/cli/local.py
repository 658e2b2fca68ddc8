"""The local services' commands (`up`, `down`, `status`) and the main job."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
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
from deepsummit.cli.job_lines import reason
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
    services.up(settings, echo=typer.echo)
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
    """The main job: services up, a run of summit/train on the bundle, then where to look.

    The run is followed by asking the Prefect server: one line per stage as it ends (what it
    made, in how many seconds) and, while the train stage runs, wherever it runs, which
    training of three, the epoch and the time left, at least every 20 s. At the end: the flow
    run, the model version, the MLflow run, Data Docs and the run folder."""
    from deepsummit.cli.job_watch import Watch, WatchFailed, parameters, start_run
    from deepsummit.flows.stages import CHAIN  # not for every command: it imports Prefect

    settings = settings_for(profile, RunOptions())
    typer.echo("local services: starting what is not running (Prefect, MLflow, worker, scorer)")
    services.up(settings, echo=typer.echo)
    started = time.monotonic()
    deadline = started + timeout_s
    api = services.prefect_api(settings)
    ui = local.prefect_ui_url(settings)
    try:
        params = parameters([*(param or []), *([f"profile={profile}"] if profile else [])])
        run = start_run(api, "summit/train", params)
        typer.echo(f"\nsummit/train: flow run {run['name']}  {ui}/runs/flow-run/{run['id']}")
        watch = Watch(api, run, tuple(stage.name for stage in CHAIN), typer.echo)
        run = watch.follow(deadline)
    except WatchFailed as error:
        raise fail(str(error), error.code) from None
    _print_links(settings, run, (time.monotonic() - started) / 60)


def _print_links(settings: Settings, run: dict[str, Any], minutes: float) -> None:
    """Where to look once the run ended; a run that did not complete fails the command."""
    ui = local.prefect_ui_url(settings)
    typer.echo("")
    typer.echo(f"Prefect flow run   {ui}/runs/flow-run/{run['id']}  ({minutes:.1f} min)")
    typer.echo(f"Prefect login      {local.prefect_login_hint(settings)}")
    summary_file = settings.paths.runs_dir / run["id"] / "summary.json"
    if run["state_type"] != "COMPLETED" or not summary_file.exists():
        typer.echo(f"worker log         {services.log_file(settings, services.WORKER)}")
        state = run.get("state") or {}
        raise fail(
            f"summit/train did not complete: {reason(run['state_name'], state.get('message'))}",
            ExitCode.FAILED,
        )
    summary = json.loads(summary_file.read_text())
    role = "champion" if summary["champion"] else "challenger"
    typer.echo(
        f"MLflow model       {summary['model_version_url']}  (v{summary['model_version']}, {role})"
    )
    typer.echo(f"MLflow run         {summary['mlflow_run_url']}")
    typer.echo(f"Data Docs          {summary['data_docs']}")
    typer.echo(f"run folder         {summary['run_dir']}")
