"""Command options made from the planned-attempt fields (deepsummit/core/planned.py), so that
`deepsummit predict` and `deepsummit outlook` say what the model's input says, and only there.

A command decorated with `planned_options(scopes)` gets one option per field of those scopes,
named after the field (`push_date` → `--push-date`), with its type and help from the
declaration; it receives the values a person gave in one `planned` mapping (unset ones absent).
"""

from __future__ import annotations

import datetime as dt
import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any

import typer

from deepsummit.core.planned import PlannedField, Scope, fields_of

DATE_FORMATS = ["%Y-%m-%d"]


def flag(field: PlannedField) -> str:
    return "--" + field.name.replace("_", "-")


def _parameter(field: PlannedField) -> inspect.Parameter:
    """The typer parameter of one field: required fields without a default, booleans as
    --x/--no-x switches, dates parsed as YYYY-MM-DD."""
    help_text = field.help[0].upper() + field.help[1:] + "."
    if field.default is not None:
        help_text += f" (default: {field.default})"
    if field.type == "boolean":
        option = typer.Option(f"{flag(field)}/--no-{flag(field)[2:]}", help=help_text)
    elif field.type == "date":
        option = typer.Option(flag(field), formats=DATE_FORMATS, help=help_text)
    else:
        option = typer.Option(flag(field), help=help_text)
    value_type = dt.datetime if field.type == "date" else field.python_type
    if field.required:
        annotation, default = Annotated[value_type, option], inspect.Parameter.empty
    else:
        annotation, default = Annotated[value_type | None, option], None  # None = not given
    return inspect.Parameter(
        field.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
    )


def _value(field: PlannedField, value: Any) -> Any:
    return value.date() if field.type == "date" and value is not None else value


def planned_options(
    *scopes: Scope, exclude: tuple[str, ...] = ()
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Give the decorated command an option per planned field of `scopes` (but `exclude`);
    the command's own parameters follow them, and its `planned` parameter receives the
    values given, by field name."""
    fields = [f for f in fields_of(*scopes) if f.name not in exclude]

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        signature = inspect.signature(command, eval_str=True)  # the annotations as objects
        own = [p for p in signature.parameters.values() if p.name != "planned"]
        own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own]

        @functools.wraps(command)
        def with_planned(**given: Any) -> None:
            planned = {
                f.name: _value(f, value) for f in fields if (value := given.pop(f.name)) is not None
            }
            command(**given, planned=planned)

        parameters = [*(_parameter(f) for f in fields), *own]
        with_planned.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        with_planned.__annotations__ = {p.name: p.annotation for p in parameters}
        return with_planned

    return decorate
