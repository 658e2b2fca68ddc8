"""The planned-attempt fields, declared once: the model's signature, the CLI's options, the
outlook's settings and the serving page's table (docs/serving.md) are all made from them."""

from __future__ import annotations

import datetime as dt

import pytest
from typer.testing import CliRunner

from deepsummit.cli.app import app
from deepsummit.cli.planned_options import flag
from deepsummit.core.config import load_settings
from deepsummit.core.planned import (
    PLANNED_FIELDS,
    fields_of,
    markdown_table,
    planned_frame,
    planned_record,
)
from deepsummit.core.sections import PROJECT_ROOT, OutlookPlan, TeamMember
from deepsummit.serve.pyfunc import signature


def test_the_serving_page_documents_every_field() -> None:
    assert markdown_table() in (PROJECT_ROOT / "docs" / "serving.md").read_text()


def test_the_model_signature_has_every_field() -> None:
    inputs = {spec.name: spec for spec in signature().inputs.inputs}
    for field in PLANNED_FIELDS:
        assert inputs[field.name].required == field.required
    assert inputs["push_date"].type.name == "string"  # a date travels as ISO text


@pytest.mark.parametrize("command", ["predict", "outlook"])
def test_the_commands_offer_the_fields_as_options(command: str) -> None:
    text = CliRunner().invoke(app, [command, "--help"], terminal_width=200).output
    scopes = ("attempt", "member", "plan") if command == "predict" else ("member", "plan")
    for field in fields_of(*scopes):
        if field.name != "weather_source":
            assert flag(field) in text, (command, field.name)


def test_the_outlook_settings_are_the_member_and_plan_fields() -> None:
    assert set(TeamMember.model_fields) - {"name"} == {f.name for f in fields_of("member")}
    assert set(OutlookPlan.model_fields) == {f.name for f in fields_of("plan")}
    with pytest.raises(ValueError, match="sex"):
        TeamMember(name="A", sex="X")


def test_a_record_has_every_field_with_its_default_and_text_dates() -> None:
    record = planned_record({"peak": "EVER", "push_date": dt.date(2019, 5, 22), "age": 40})
    assert list(record) == [f.name for f in PLANNED_FIELDS]
    assert record["push_date"] == "2019-05-22" and record["age"] == 40.0
    assert record["role"] == "Climber" and record["hired"] is False and record["sex"] is None
    with pytest.raises(ValueError, match="not a field of a planned attempt: height"):
        planned_record({"peak": "EVER", "push_date": dt.date(2019, 5, 22), "height": 2})


def test_a_frame_keeps_number_columns_doubles_when_all_are_missing() -> None:
    frame = planned_frame([planned_record({"peak": "EVER", "push_date": dt.date(2019, 5, 22)})])
    assert str(frame["team_size"].dtype) == "float64"


def test_a_profile_cannot_set_what_the_inputs_fix() -> None:
    with pytest.raises(ValueError, match=r"model\.n_numeric: fixed by the model's inputs"):
        load_settings(overrides={"model": {"n_numeric": 3}})
