"""`deepsummit`: run each stage by hand as its Prefect flow, manage the local services, and run
the main job. Every path, URL, the warehouse, the tracking URI and the profile are options whose
defaults come from deepsummit.toml (see deepsummit/core/config.py); an option given here wins.

A stage command uses the local Prefect server when `deepsummit up` runs it (the run shows in its
UI), and Prefect's temporary in-process server otherwise.

For scripts: a failure prints one line on stderr (`error: …`) and exits with the code of its
kind, each error class of deepsummit/core/errors.py mapped to one in deepsummit/cli/exit_codes.py:

    0 ok: done
    1 failed: a stage could not go on (the error line says why), or a bug
    2 bad input: an option, file, date or peak that cannot be used (usage errors too)
    3 service unavailable: a service down, no champion yet, or a source not answering
    4 quota spent: the weather API's quota is spent (what was fetched is kept)

`predict`, `outlook` and `status` take `--json`: one JSON document on stdout, nothing else there
(logs and progress go to stderr). `status` exits 3 while a service it manages is not healthy, so
it serves as a health check. `--version` also names the champion's version. Shell completion:
`deepsummit --install-completion`. docs/cli.md is this help, written by
`python -m deepsummit.cli.reference`.

Heavy packages (torch, MLflow, Prefect, Great Expectations) are imported by the commands that
use them, never here: `--help`, `status` and `predict` do not pay for what they do not run.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import gc
import importlib.metadata
import json
import logging
import os
import re
import subprocess
import sys
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from deepsummit.cli.exit_codes import ExitCode, describe, exit_code, label
from deepsummit.cli.planned_options import planned_options
from deepsummit.core.config import Settings, TeamMember, load_settings
from deepsummit.core.errors import PipelineError
from deepsummit.core.options import RunOptions
from deepsummit.services import supervisor as services

# A console tool prints its own summary; MLflow's per-file download bars would bury it.
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

# The table under `deepsummit --help`; under each command's, the codes in one line.
EXIT_CODES_HELP = "Exit codes:\n\n" + "\n\n".join(describe(code) for code in ExitCode)
EXIT_CODES_LINE = (
    f"Exit codes: {', '.join(label(code) for code in ExitCode)} (`deepsummit --help` says more)."
)

app = typer.Typer(
    help="DeepSummit: P(summit) for a Himalayan expedition member, as an orchestrated pipeline.",
    epilog=EXIT_CODES_HELP,
    no_args_is_help=True,
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


def _champion_line() -> str:
    """Which version the registry names champion, or in a few words why it cannot say."""
    try:
        config = load_settings().mlflow
    except (ValidationError, ValueError) as error:
        return f"champion: not looked up (settings: {str(error).splitlines()[0]})"
    from deepsummit.contracts.champion import champion_version, registry_reachable

    where = f"{config.registered_model}@{config.champion_alias} at {config.tracking_uri}"
    if not registry_reachable(config.tracking_uri):
        return f"champion: unknown, the registry is not answering ({where})"
    try:
        return f"champion: v{champion_version(config).version} ({where})"
    except PipelineError as error:
        return f"champion: not found ({error})"


def _print_version(asked: bool) -> None:
    if asked:
        typer.echo(f"deepsummit {importlib.metadata.version('deepsummit')}")
        typer.echo(_champion_line())
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print the version, and the champion's when the registry answers.",
        ),
    ] = False,
) -> None:
    """The options of `deepsummit` itself, before a command: --version (typer adds those of
    shell completion)."""


AsJson = Annotated[
    bool,
    typer.Option(
        "--json", help="Print one JSON document on stdout (and nothing else there) for scripts."
    ),
]


def _options(given: dict[str, Any]) -> RunOptions:
    """The RunOptions among a command's arguments (`locals()` of the command)."""
    return RunOptions(**{k: v for k, v in given.items() if k in RunOptions.model_fields})


def _fail(message: str, code: ExitCode) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def _command(
    name: str | None = None,
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """`app.command`, for a command whose PipelineError ends it with the error's one line on
    stderr and the exit code of its class (deepsummit/cli/exit_codes.py)."""

    def register(command: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(command)
        def run(**given: Any) -> None:
            try:
                command(**given)
            except PipelineError as error:
                # The failed run's frames hold warehouse connections and query results; freed
                # now, DuckDB's bindings do not report them as leaked at exit under the line.
                traceback.clear_frames(error.__traceback__)
                gc.collect()
                raise _fail(str(error), exit_code(error)) from None

        app.command(name, epilog=EXIT_CODES_LINE)(run)
        return command

    return register


def _settings(
    profile: str | None, options: RunOptions, overrides: dict[str, Any] | None = None
) -> Settings:
    try:
        return load_settings(profile, options.overrides(overrides))
    except ValidationError as error:
        first = error.errors()[0]
        location = ".".join(map(str, first["loc"]))
        raise _fail(f"setting {location}: {first['msg']}", ExitCode.BAD_INPUT) from None
    except ValueError as error:
        raise _fail(str(error), ExitCode.BAD_INPUT) from None


def _json_value(value: Any) -> Any:
    """What json cannot write by itself: dates as ISO text, paths as text."""
    if isinstance(value, dt.date | dt.datetime):
        return value.isoformat()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def _print_json(document: Any) -> None:
    typer.echo(json.dumps(document, indent=2, default=_json_value, allow_nan=False))


@contextlib.contextmanager
def _stdout_for_json_only(as_json: bool) -> Iterator[None]:
    """With --json, what the work writes to stdout (a library's print, a log handler, a
    subprocess) goes to stderr, so that stdout holds only the document printed afterwards."""
    if not as_json:
        yield
        return
    stdout = sys.stdout
    stdout.flush()
    try:
        descriptor = stdout.fileno()
    except (AttributeError, OSError, ValueError):  # an in-memory stream (a test's runner)
        descriptor = None
    saved = None
    if descriptor is not None:
        saved = os.dup(descriptor)
        os.dup2(sys.stderr.fileno(), descriptor)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        stdout.flush()  # what a handler holding the stream wrote goes out while it is stderr
        if saved is not None:
            os.dup2(saved, stdout.fileno())
            os.close(saved)


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
    """Run one stage's flow locally and print its report."""
    settings = _settings(profile, options)
    if name == "train":
        _require_tracking(settings)
    _use_prefect(settings)
    from deepsummit.flows.summit import STAGE_FLOWS

    typer.echo(_run_flow(STAGE_FLOWS[name], profile, options).render())


def _run_flow(
    flow: Any, profile: str | None, options: RunOptions, overrides: dict[str, Any] | None = None
) -> Any:
    """Run `flow`; the report it returns."""
    for handler in logging.getLogger().handlers:  # Prefect's console handler sits on the root
        handler.addFilter(_OneLine())
    return flow(profile=profile, options=options, overrides=overrides)


@_command()
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


@_command()
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


@_command()
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


@_command()
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


@_command()
def drift(
    profile: Profile = None,
    snapshot: Snapshot = None,
    features_dir: FeaturesDir = None,
    tracking_uri: TrackingUri = None,
) -> None:
    """Compare the newest season's inputs with the champion's training rows of the same weeks."""
    _stage("drift", profile, _options(locals()))


@_command()
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
            " or pass --tracking-uri sqlite:///var/mlflow.db",
            ExitCode.SERVICE_UNAVAILABLE,
        )


@_command()
def up(profile: Profile = None) -> None:
    """Start the local Prefect server, MLflow server and worker (what runs already is kept),
    create the work pool and apply the deployments of prefect.yaml."""
    settings = _settings(profile, RunOptions())
    for line in services.up(settings):
        typer.echo(line)
    typer.echo(_render_status(_status_document(settings)))


@_command()
def down(profile: Profile = None) -> None:
    """Stop the processes `deepsummit up` started (by their recorded PIDs)."""
    for line in services.down(_settings(profile, RunOptions())):
        typer.echo(line)


@_command()
def status(profile: Profile = None, as_json: AsJson = False) -> None:
    """Where the warehouse, the MLflow registry and the Prefect server are, and what runs.

    A health check: exits 3 (service unavailable) while a service `deepsummit up` manages is
    not healthy."""
    document = _status_document(_settings(profile, RunOptions()))
    if as_json:
        _print_json(document)
    else:
        typer.echo(_render_status(document))
    down = [service["name"] for service in document["services"] if not service["healthy"]]
    if down:
        raise _fail(f"not healthy: {', '.join(down)}", ExitCode.SERVICE_UNAVAILABLE)


def _status_document(settings: Settings) -> dict[str, Any]:
    """What `deepsummit status` reports, as data (its --json document)."""
    warehouse = settings.paths.warehouse
    backend, artifacts = services.mlflow_store(settings)
    return {
        "warehouse": {
            "path": warehouse,
            "bytes": warehouse.stat().st_size if warehouse.exists() else None,
        },
        "mlflow": {
            "tracking_uri": settings.mlflow.tracking_uri,
            "server_store": backend,
            "server_artifacts": artifacts,
        },
        "prefect": {
            "api_url": settings.services.prefect_api_url,
            "home": services.prefect_home(settings),
            "login": services.prefect_login_hint(settings),
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


@_command()
@planned_options("attempt", "member", "plan", exclude=("weather_source",))
def predict(
    planned: dict[str, Any],
    profile: Profile = None,
    warehouse: Warehouse = None,
    tracking_uri: TrackingUri = None,
    as_json: AsJson = False,
) -> None:
    """Score a planned attempt with the champion model (weather from the warehouse)."""
    settings = _settings(profile, _options(locals()))
    _require_tracking(settings)
    from deepsummit.serve.predict import predict_attempt

    with _stdout_for_json_only(as_json):
        prediction = predict_attempt(settings, planned)
    if as_json:
        _print_json(prediction.as_dict())
    else:
        typer.echo(prediction.render())


@_command()
@planned_options("member", "plan")
def outlook(
    planned: dict[str, Any],
    peak: _option("peak") = None,
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
    as_json: AsJson = False,
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
        raise _fail(
            "give --team FILE.csv or one member's attributes (--age, --sex, …), not both",
            ExitCode.BAD_INPUT,
        )
    overrides: dict[str, Any] = dict(plan)
    if member:
        overrides["team"] = [{"name": "member", **member}]
    overrides = {"outlook": overrides} if overrides else {}
    settings = _settings(profile, options, overrides)
    _require_tracking(settings)
    _use_prefect(settings)
    from deepsummit.flows.summit import outlook as outlook_flow

    with _stdout_for_json_only(as_json):
        report = _run_flow(outlook_flow, profile, options, overrides)
    if as_json:
        _print_json(report.as_dict())
    else:
        typer.echo(report.render())


@_command("main-job")
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
    ui = services.prefect_ui_url(settings)
    typer.echo("")
    if flow_run_id is None:
        raise _fail("could not start summit/train; see the output above", ExitCode.FAILED)
    typer.echo(f"Prefect flow run   {ui}/runs/flow-run/{flow_run_id}  ({minutes:.1f} min)")
    typer.echo(f"Prefect login      {services.prefect_login_hint(settings)}")
    summary_file = settings.paths.runs_dir / flow_run_id / "summary.json"
    if not summary_file.exists():
        typer.echo(f"worker log         {services.log_file(settings, services.WORKER)}")
        raise _fail(
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


if __name__ == "__main__":  # `python -m deepsummit.cli.app`, the same as the `deepsummit` script
    app()
