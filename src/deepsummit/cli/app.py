"""`deepsummit`: run each stage by hand as its Prefect flow, manage the local services, and run
the main job. Every path, URL, the warehouse, the tracking URI and the profile are options whose
defaults come from deepsummit.toml (see deepsummit/core/config.py); an option given here wins.

A stage command uses the local Prefect server when `deepsummit up` runs it (the run shows in its
UI), and Prefect's temporary in-process server otherwise. A PipelineError (bad input, quota, …)
prints one line on stderr and exits 1.
"""

from __future__ import annotations

import datetime as dt
import gc
import json
import logging
import os
import re
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from deepsummit.cli.planned_options import planned_options
from deepsummit.core.config import Settings, TeamMember, load_settings
from deepsummit.core.errors import PipelineError
from deepsummit.core.options import RunOptions
from deepsummit.services import supervisor as services

# A console tool prints its own summary; MLflow's per-file download bars would bury it.
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

app = typer.Typer(
    help="DeepSummit: P(summit) for a Himalayan expedition member, as an orchestrated pipeline.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)


def _option(name: str) -> Any:
    """A command option for field `name` of RunOptions: its type and help from the model, and
    the setting it overrides named in the help (default from config)."""
    field = RunOptions.model_fields[name]
    text = f"{field.description} (default: {RunOptions.setting(name)} from config)"
    return Annotated[field.annotation, typer.Option(help=text)]


Profile = Annotated[
    str | None,
    typer.Option(help="Settings profile of deepsummit.toml (cpu, base, tiny). (default: cpu)"),
]
DataDir = _option("data_dir")
Warehouse = _option("warehouse")
Members = _option("members")
Expeditions = _option("expeditions")
Peaks = _option("peaks")
HdbMembers = _option("hdb_members")
HdbExpeditions = _option("hdb_expeditions")
AllowShrink = _option("allow_shrink")
WeatherSource = _option("weather_source")
ApiUrl = _option("api_url")
Archive = _option("archive")
FeaturesDir = _option("features_dir")
TrainUntil = _option("train_until")
ValidationUntil = _option("validation_until")
TestUntil = _option("test_until")
Snapshot = _option("snapshot")
MaxTrainRows = _option("max_train_rows")
MaxEpochs = _option("max_epochs")
TrackingUri = _option("tracking_uri")


def _options(given: dict[str, Any]) -> RunOptions:
    """The RunOptions among a command's arguments (`locals()` of the command)."""
    return RunOptions(**{k: v for k, v in given.items() if k in RunOptions.model_fields})


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(1)


def _settings(
    profile: str | None, options: RunOptions, overrides: dict[str, Any] | None = None
) -> Settings:
    try:
        return load_settings(profile, options.overrides(overrides))
    except ValidationError as error:
        first = error.errors()[0]
        raise _fail(f"setting {'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    except ValueError as error:
        raise _fail(str(error)) from None


class _OneLine(logging.Filter):
    """Keep the console to one line for a PipelineError: its message says all (no traceback)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], PipelineError):
            record.exc_info = None
            record.exc_text = None
        return True


def _use_prefect(settings: Settings) -> None:
    """Talk to the local server when it is up; else Prefect's temporary server (same PREFECT_HOME).

    Must run before Prefect is imported: Prefect reads its settings at import time.
    """
    env = services.prefect_env(settings)
    services.prefect_home(settings).mkdir(parents=True, exist_ok=True)
    if not services.prefect_healthy(settings):
        del env["PREFECT_API_URL"]
        del env["PREFECT_UI_URL"]  # no server: no "View at" link to it either
    for key, value in env.items():
        os.environ.setdefault(key, value)


def _stage(name: str, profile: str | None, options: RunOptions) -> None:
    """Run one stage's flow locally and print its report (or one error line and exit 1)."""
    settings = _settings(profile, options)
    if name == "train":
        _require_tracking(settings)
    _use_prefect(settings)
    from deepsummit.flows.summit import STAGE_FLOWS

    _run_flow(STAGE_FLOWS[name], profile, options)


def _run_flow(
    flow: Any, profile: str | None, options: RunOptions, overrides: dict[str, Any] | None = None
) -> None:
    """Run `flow` and print the report it returns (or one error line and exit 1)."""
    for handler in logging.getLogger().handlers:  # Prefect's console handler sits on the root
        handler.addFilter(_OneLine())
    try:
        report = flow(profile=profile, options=options, overrides=overrides)
    except PipelineError as error:
        # The failed run's frames hold warehouse connections and query results; freed now,
        # DuckDB's bindings do not report them as leaked at exit under the error line.
        traceback.clear_frames(error.__traceback__)
        gc.collect()
        raise _fail(str(error)) from None
    typer.echo(report.render())


@app.command()
def ingest(
    profile: Profile = None,
    data_dir: DataDir = None,
    warehouse: Warehouse = None,
    members: Members = None,
    expeditions: Expeditions = None,
    peaks: Peaks = None,
    hdb_members: HdbMembers = None,
    hdb_expeditions: HdbExpeditions = None,
    allow_shrink: AllowShrink = None,
) -> None:
    """Load the Himalayan Database records: raw tables, clean tables, quarantine, Data Docs."""
    _stage("ingest", profile, _options(locals()))


@app.command()
def weather(
    profile: Profile = None,
    data_dir: DataDir = None,
    warehouse: Warehouse = None,
    weather_source: WeatherSource = None,
    api_url: ApiUrl = None,
    archive: Archive = None,
) -> None:
    """Store the daily weather the attempts' 90-day windows need in weather_daily."""
    _stage("weather", profile, _options(locals()))


@app.command()
def features(
    profile: Profile = None,
    warehouse: Warehouse = None,
    features_dir: FeaturesDir = None,
    train_until: TrainUntil = None,
    validation_until: ValidationUntil = None,
    test_until: TestUntil = None,
) -> None:
    """Build attempts, weather windows and the model inputs (a features snapshot)."""
    _stage("features", profile, _options(locals()))


@app.command()
def train(
    profile: Profile = None,
    snapshot: Snapshot = None,
    features_dir: FeaturesDir = None,
    tracking_uri: TrackingUri = None,
    max_train_rows: MaxTrainRows = None,
    max_epochs: MaxEpochs = None,
) -> None:
    """Train the transformer and the baselines, log to MLflow, register, gate the champion."""
    _stage("train", profile, _options(locals()))


@app.command()
def drift(
    profile: Profile = None,
    snapshot: Snapshot = None,
    features_dir: FeaturesDir = None,
    tracking_uri: TrackingUri = None,
) -> None:
    """Compare the newest season's inputs with the champion's training split (input drift)."""
    _stage("drift", profile, _options(locals()))


@app.command()
def backtest(
    profile: Profile = None,
    snapshot: Snapshot = None,
    features_dir: FeaturesDir = None,
    tracking_uri: TrackingUri = None,
) -> None:
    """Backtest the newest features snapshot season by season and push day by push day (each
    fold cached: a rerun trains nothing, a run cut short resumes)."""
    _stage("backtest", profile, _options(locals()))


def _require_tracking(settings: Settings) -> None:
    uri = settings.mlflow.tracking_uri
    if uri.startswith(("http://", "https://")) and not services.http_ok(
        f"{uri.rstrip('/')}/health"
    ):
        raise _fail(
            f"MLflow tracking server {uri} is not answering; start it with `deepsummit up`"
            " or pass --tracking-uri sqlite:///var/mlflow.db"
        )


@app.command()
def up(profile: Profile = None) -> None:
    """Start the local Prefect server, MLflow server and worker (what runs already is kept),
    create the work pool and apply the deployments of prefect.yaml."""
    settings = _settings(profile, RunOptions())
    try:
        for line in services.up(settings):
            typer.echo(line)
    except PipelineError as error:
        raise _fail(str(error)) from None
    _print_status(settings)


@app.command()
def down(profile: Profile = None) -> None:
    """Stop the processes `deepsummit up` started (by their recorded PIDs)."""
    for line in services.down(_settings(profile, RunOptions())):
        typer.echo(line)


@app.command()
def status(profile: Profile = None) -> None:
    """Where the warehouse, the MLflow registry and the Prefect server are, and what runs."""
    _print_status(_settings(profile, RunOptions()))


def _print_status(settings: Settings) -> None:
    warehouse = settings.paths.warehouse
    size = f"{warehouse.stat().st_size / 1e6:.1f} MB" if warehouse.exists() else "not created yet"
    backend, artifacts = services.mlflow_store(settings)
    typer.echo(f"warehouse        {warehouse} ({size})")
    home = services.prefect_home(settings)
    typer.echo(f"MLflow registry  {settings.mlflow.tracking_uri}")
    typer.echo(f"                 server store {backend}, artifacts {artifacts}")
    typer.echo(f"Prefect server   {settings.services.prefect_api_url} (PREFECT_HOME {home})")
    typer.echo(f"Prefect login    {services.prefect_login_hint(settings)}")
    typer.echo(f"alerts           {services.describe_alerts(settings)}")
    typer.echo(f"service logs     {settings.services.run_dir}")
    for service in services.status(settings):
        typer.echo(service.render())


@app.command()
@planned_options("attempt", "member", "plan", exclude=("weather_source",))
def predict(
    planned: dict[str, Any],
    profile: Profile = None,
    warehouse: Warehouse = None,
    tracking_uri: TrackingUri = None,
) -> None:
    """Score a planned attempt with the champion model (weather from the warehouse)."""
    settings = _settings(profile, _options(locals()))
    _require_tracking(settings)
    from deepsummit.serve.predict import predict_attempt

    try:
        typer.echo(predict_attempt(settings, planned).render())
    except PipelineError as error:
        raise _fail(str(error)) from None


@app.command()
@planned_options("member", "plan")
def outlook(
    planned: dict[str, Any],
    peaks: Annotated[
        list[str] | None,
        typer.Option(
            "--peak",
            help=f"{RunOptions.model_fields['peaks'].description} "
            "(default: outlook.peaks from config)",
        ),
    ] = None,
    first_day: Annotated[
        dt.datetime | None,
        typer.Option(
            "--from",
            formats=["%Y-%m-%d"],
            help="First candidate push day, YYYY-MM-DD (default: today in Nepal).",
        ),
    ] = None,
    days: _option("days") = None,
    team: _option("team") = None,
    as_of: Annotated[
        dt.datetime | None,
        typer.Option(
            "--as-of",
            formats=["%Y-%m-%d"],
            help=RunOptions.model_fields["as_of"].description,
        ),
    ] = None,
    without_weather: Annotated[
        bool | None,
        typer.Option(
            "--without-weather", help=RunOptions.model_fields["without_weather"].description
        ),
    ] = None,
    weather_source: WeatherSource = None,
    profile: Profile = None,
    warehouse: Warehouse = None,
    tracking_uri: TrackingUri = None,
    forecast_url: _option("forecast_url") = None,
) -> None:
    """P(summit) per candidate push day of the next two weeks for each member and the team, by
    the champion, from the Open-Meteo forecast (fetched first); with --as-of, the outlook of
    that past morning from stored weather (--weather-source archive). The team: --team
    FILE.csv, or one member's attributes (--age, --sex, …), or outlook.team_file from config."""
    options = _options(
        {
            **locals(),
            "first_day": first_day.date() if first_day else None,
            "as_of": as_of.date() if as_of else None,
        }
    )
    member = {k: v for k, v in planned.items() if k in TeamMember.model_fields}
    plan = {k: v for k, v in planned.items() if k not in member}
    if team is not None and member:
        raise _fail("give --team FILE.csv or one member's attributes (--age, --sex, …), not both")
    overrides: dict[str, Any] = dict(plan)
    if member:
        overrides["team"] = [{"name": "member", **member}]
    overrides = {"outlook": overrides} if overrides else {}
    settings = _settings(profile, options, overrides)
    _require_tracking(settings)
    _use_prefect(settings)
    from deepsummit.flows.summit import outlook as outlook_flow

    _run_flow(outlook_flow, profile, options, overrides)


@app.command("main-job")
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
    settings = _settings(profile, RunOptions())
    try:
        for line in services.up(settings):
            typer.echo(line)
    except PipelineError as error:
        raise _fail(str(error)) from None
    params = [*(param or []), *([f"profile={profile}"] if profile else [])]
    command = [
        str(Path(sys.executable).parent / "prefect"), "deployment", "run", "summit/train",
        "--watch", "--watch-timeout", str(timeout_s),
        *(arg for p in params for arg in ("--param", p)),
    ]  # fmt: skip
    started = dt.datetime.now()
    flow_run_id = _stream(command, {**os.environ, **services.prefect_env(settings)})
    minutes = (dt.datetime.now() - started).total_seconds() / 60
    ui = services.prefect_ui_url(settings)
    typer.echo("")
    if flow_run_id is None:
        raise _fail("could not start summit/train; see the output above")
    typer.echo(f"Prefect flow run   {ui}/runs/flow-run/{flow_run_id}  ({minutes:.1f} min)")
    typer.echo(f"Prefect login      {services.prefect_login_hint(settings)}")
    summary_file = settings.paths.runs_dir / flow_run_id / "summary.json"
    if not summary_file.exists():
        typer.echo(f"worker log         {services.log_file(settings, services.WORKER)}")
        raise _fail("summit/train did not complete; see the flow run and the worker log")
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


if __name__ == "__main__":  # `python -m deepsummit.cli.app`, the same as the `deepsummit` script
    app()
