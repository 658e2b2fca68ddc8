"""The commands that ask the champion: `predict` and `outlook`."""

from __future__ import annotations

import datetime as dt
import logging
import os
import sys
from typing import Annotated, Any

import typer

from deepsummit.cli.common import (
    AsJson,
    Profile,
    TrackingUri,
    Warehouse,
    WeatherSource,
    command,
    fail,
    option,
    print_json,
    require_tracking,
    run_flow,
    run_options,
    settings_for,
    stdout_for_json_only,
    use_prefect,
)
from deepsummit.cli.exit_codes import ExitCode
from deepsummit.cli.planned_options import planned_options
from deepsummit.core.options import RunOptions
from deepsummit.core.sections import TeamMember


@command()
@planned_options("attempt", "member", "plan", exclude=("weather_source",))
def predict(
    planned: dict[str, Any],
    profile: Profile = None,
    warehouse: Warehouse = None,
    tracking_uri: TrackingUri = None,
    as_json: AsJson = False,
) -> None:
    """Score a planned attempt with the champion model (weather from the warehouse); answered
    by the scorer `deepsummit up` started when it runs with these settings."""
    settings = settings_for(profile, run_options(locals()))
    require_tracking(settings.mlflow)
    from deepsummit.serve.scorer_client import ask_scorer

    with stdout_for_json_only(as_json):
        prediction = ask_scorer(settings, planned)
        if prediction is None:
            from deepsummit.serve.predict import predict_attempt

            prediction = predict_attempt(settings, planned)
    if as_json:
        print_json(prediction.as_dict())
    else:
        typer.echo(prediction.render())
    exit_without_teardown()


def exit_without_teardown() -> None:
    """End a command line's process now, exit code 0, its output flushed, without the
    interpreter's teardown: freeing PyTorch's modules object by object took 0.6 s of CPU after
    the answer was printed (a third of the process). Nothing of predict's needs it (its
    warehouse connections and files are closed, the rest is memory). Called in-process (a
    test's runner, whose stdout is not the process's), it returns."""
    if sys.stdout is not sys.__stdout__:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(ExitCode.OK)


@command()
@planned_options("member", "plan")
def outlook(
    planned: dict[str, Any],
    peak: option("peak") = None,
    first_day: Annotated[
        dt.datetime | None,
        typer.Option(
            "--from",
            formats=["%Y-%m-%d"],
            help="First candidate push day, YYYY-MM-DD (default: today in Nepal).",
        ),
    ] = None,
    days: option("days") = None,
    team: option("team") = None,
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
    forecast_url: option("forecast_url") = None,
    as_json: AsJson = False,
) -> None:
    """P(summit) per candidate push day of the next two weeks for each member and the team, by
    the champion, from the Open-Meteo forecast (fetched first); with --as-of, the outlook of
    that past morning from stored weather (--weather-source archive). The team: --team
    FILE.csv, or one member's attributes (--age, --sex, …), or outlook.team_file from config."""
    options = run_options(
        {
            **locals(),
            "first_day": first_day.date() if first_day else None,
            "as_of": as_of.date() if as_of else None,
        }
    )
    overrides = outlook_overrides(planned, team is not None)
    settings = settings_for(profile, options, overrides)
    require_tracking(settings.mlflow)
    use_prefect(settings)
    from deepsummit.flows.summit import outlook as outlook_flow

    with stdout_for_json_only(as_json):
        report = run_flow(outlook_flow, profile, options, overrides)
    if as_json:
        print_json(report.as_dict())
    else:
        typer.echo(report.render())


def outlook_overrides(planned: dict[str, Any], team_file: bool) -> dict[str, Any]:
    """The outlook settings the planned-attempt options state: the plan, and one member's
    attributes as the team (refused beside a --team file)."""
    member = {k: v for k, v in planned.items() if k in TeamMember.model_fields}
    if team_file and member:
        raise fail(
            "give --team FILE.csv or one member's attributes (--age, --sex, …), not both",
            ExitCode.BAD_INPUT,
        )
    overrides: dict[str, Any] = {k: v for k, v in planned.items() if k not in member}
    if member:
        overrides["team"] = [{"name": "member", **member}]
    return {"outlook": overrides} if overrides else {}
