"""What every `deepsummit` command shares: the Typer app and its root options, the command
options (each naming the setting it overrides), the settings, one-line failures with their exit
codes, JSON output for scripts, and running a stage's flow on the local Prefect server."""

import contextlib
import datetime as dt
import functools
import gc
import importlib.metadata
import json
import logging
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from deepsummit.cli.exit_codes import ExitCode, describe, exit_code, label
from deepsummit.core.config import Settings, load_settings
from deepsummit.core.errors import PipelineError, exception_chain
from deepsummit.core.options import RunOptions
from deepsummit.core.sections import MlflowConfig, is_url
from deepsummit.services import health, local
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


def option(name: str) -> Any:
    """A command option for field `name` of RunOptions: its type and help from the model, and
    the setting it overrides named in the help (default from config)."""
    field = RunOptions.model_fields[name]
    text = f"{field.description} (default: {RunOptions.setting(name)} from config)"
    return Annotated[field.annotation, typer.Option(help=text)]


Profile = Annotated[
    str | None,
    typer.Option(help="Settings profile of deepsummit.toml (cpu, base, tiny). (default: cpu)"),
]
DataDir = option("data_dir")
Warehouse = option("warehouse")
Members = option("members")
Expeditions = option("expeditions")
Peaks = option("peaks")
HdbMembers = option("hdb_members")
HdbExpeditions = option("hdb_expeditions")
AllowShrink = option("allow_shrink")
WeatherSource = option("weather_source")
ApiUrl = option("api_url")
Archive = option("archive")
FeaturesDir = option("features_dir")
TrainUntil = option("train_until")
ValidationUntil = option("validation_until")
TestUntil = option("test_until")
Snapshot = option("snapshot")
MaxTrainRows = option("max_train_rows")
MaxEpochs = option("max_epochs")
TrackingUri = option("tracking_uri")


def champion_line() -> str:
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


def print_version(asked: bool) -> None:
    if asked:
        typer.echo(f"deepsummit {importlib.metadata.version('deepsummit')}")
        typer.echo(champion_line())
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=print_version,
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


def run_options(given: dict[str, Any]) -> RunOptions:
    """The RunOptions among a command's arguments (`locals()` of the command)."""
    return RunOptions(**{k: v for k, v in given.items() if k in RunOptions.model_fields})


def fail(message: str, code: ExitCode) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def command(
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
                # The failed run's frames (those of the errors it was raised from too) hold
                # warehouse connections and query results; freed now, DuckDB's bindings do not
                # report them as leaked at exit under the line.
                for link in exception_chain(error):
                    traceback.clear_frames(link.__traceback__)
                gc.collect()
                raise fail(str(error), exit_code(error)) from None

        app.command(name, epilog=EXIT_CODES_LINE)(run)
        return command

    return register


def settings_for(
    profile: str | None, options: RunOptions, overrides: dict[str, Any] | None = None
) -> Settings:
    try:
        return load_settings(profile, options.overrides(overrides))
    except ValidationError as error:
        first = error.errors()[0]
        location = ".".join(map(str, first["loc"]))
        raise fail(f"setting {location}: {first['msg']}", ExitCode.BAD_INPUT) from None
    except ValueError as error:
        raise fail(str(error), ExitCode.BAD_INPUT) from None


def json_value(value: Any) -> Any:
    """What json cannot write by itself: dates as ISO text, paths as text."""
    if isinstance(value, dt.date | dt.datetime):
        return value.isoformat()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def print_json(document: Any) -> None:
    typer.echo(json.dumps(document, indent=2, default=json_value, allow_nan=False))


@contextlib.contextmanager
def stdout_for_json_only(as_json: bool) -> Iterator[None]:
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


class OneLine(logging.Filter):
    """Keep the console to one line for a PipelineError: its message says all (no traceback)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], PipelineError):
            record.exc_info = None
            record.exc_text = None
        return True


def use_prefect(settings: Settings) -> None:
    """Talk to the local server when it is up; else Prefect's temporary server (same PREFECT_HOME).

    Must run before Prefect is imported: Prefect reads its settings at import time.
    """
    env = services.prefect_env(settings)
    local.prefect_home(settings).mkdir(parents=True, exist_ok=True)
    if not services.prefect_healthy(settings):
        del env["PREFECT_API_URL"]
        del env["PREFECT_UI_URL"]  # no server: no "View at" link to it either
    for key, value in env.items():
        os.environ.setdefault(key, value)


def run_flow(
    flow: Any, profile: str | None, options: RunOptions, overrides: dict[str, Any] | None = None
) -> Any:
    """Run `flow`; the report it returns."""
    for handler in logging.getLogger().handlers:  # Prefect's console handler sits on the root
        handler.addFilter(OneLine())
    return flow(profile=profile, options=options, overrides=overrides)


def require_tracking(config: MlflowConfig) -> None:
    uri = config.tracking_uri
    if is_url(uri) and not health.http_ok(f"{uri.rstrip('/')}/health"):
        raise fail(
            f"MLflow tracking server {uri} is not answering; start it with `deepsummit up`"
            " or pass --tracking-uri naming the server that holds the registry",
            ExitCode.SERVICE_UNAVAILABLE,
        )
