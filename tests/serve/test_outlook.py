"""`deepsummit outlook`'s stage: each candidate push day of a peak scored for every member of the
team by the registered champion, from the forecast the local Open-Meteo server issued; the team's
expected summiters, the band of the ensemble members, the best day, the outlooks table, and one
clear line for a day beyond the forecast, a window before it, or a bad team file."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import pandas as pd
import pytest
from openmeteo_server import OpenMeteoServer
from training_fixtures import TrainedRegistry

from deepsummit.core.config import Settings, load_settings
from deepsummit.core.context import RunContext
from deepsummit.core.errors import PipelineError
from deepsummit.core.planned import planned_record, today
from deepsummit.core.warehouse import connect
from deepsummit.serve.outlook import NO_WEATHER_SOURCE, TEAM, read_team
from deepsummit.serve.predict import daily_weather
from deepsummit.serve.stage import plan_outlook
from deepsummit.weather.stage import load_forecast

pytest_plugins = ["features_fixtures", "training_fixtures"]

TEAM_FILE = Path(__file__).parents[2] / "deployments" / "outlook-team.csv"


@pytest.fixture(scope="module")
def server():
    with OpenMeteoServer() as running:
        yield running


@pytest.fixture(scope="module")
def forecast_home(
    trained_registry: TrainedRegistry, bundle_features, server, tmp_path_factory
) -> tuple[Settings, dict[str, Any]]:
    """A warehouse with the bundle's peaks and a stored forecast of EVER, next to the champion."""
    root = tmp_path_factory.mktemp("outlook")
    warehouse = root / "w.duckdb"
    with connect(warehouse) as con:
        con.execute("ATTACH ? AS bundle (READ_ONLY)", [str(bundle_features[0].paths.warehouse)])
        con.execute("CREATE TABLE peaks AS SELECT * FROM bundle.peaks")
    overrides = {
        **trained_registry.settings.model_dump(mode="json", include={"mlflow", "features"}),
        "paths": {"warehouse": str(warehouse), "runs_dir": str(root / "runs")},
        "forecast": {"api_url": server.forecast_url, "cache_path": str(root / "cache")},
        "outlook": {"peaks": ["EVER"], "team_file": str(TEAM_FILE)},
    }
    settings = load_settings("tiny", overrides)
    load_forecast(settings, RunContext(root / "run"))
    return settings, overrides


def with_outlook(overrides: dict[str, Any], **outlook: Any) -> Settings:
    changed = {**overrides, "outlook": {**overrides["outlook"], **outlook}}
    return load_settings("tiny", changed)


def test_every_member_and_day_is_scored_with_a_band_and_the_best_day_marked(
    forecast_home, tmp_path: Path
) -> None:
    settings, _ = forecast_home
    report = plan_outlook(settings, RunContext(tmp_path))

    (peak,) = report.peaks
    members = read_team(TEAM_FILE)
    assert len(members) == 12 and len(peak.days) == 16
    assert peak.days[0].day == today("Asia/Kathmandu")
    for day in peak.days:
        p, low, high = np.array(day.members).T
        assert np.all((low <= p + 1e-12) & (p <= high + 1e-12))
        assert day.expected == pytest.approx(p.sum())
        assert (day.low, day.high) == pytest.approx((low.sum(), high.sum()))
    assert peak.best.expected == max(d.expected for d in peak.days)
    assert peak.weather_source.startswith("forecast@")
    assert "*" in report.render() and "best push day" in report.render()
    assert report.chart is not None and report.chart.stat().st_size > 5_000
    assert "data:image/png;base64," in report.markdown()


def test_each_probability_is_the_registered_model_s_answer_for_that_planned_attempt(
    forecast_home, trained_registry: TrainedRegistry, tmp_path: Path
) -> None:
    """Built independently: predict's own weather query and attempt layout, the pyfunc."""
    settings, _ = forecast_home
    report = plan_outlook(settings, RunContext(tmp_path))
    (peak,) = report.peaks
    member = read_team(TEAM_FILE)[1]
    checked = [peak.days[0], peak.days[9], peak.days[-1]]
    rows = []
    with connect(settings.paths.warehouse, read_only=True) as con:
        for day in checked:
            attempt = planned_record(
                {
                    "peak": "EVER",
                    "push_date": day.day,
                    **member.model_dump(exclude={"name"}, exclude_none=True),
                    "team_size": 12,
                    "weather_source": peak.weather_source,
                }
            )
            rows.append({**attempt, **daily_weather(con, "EVER", day.day, peak.weather_source)})
    mlflow.set_tracking_uri(settings.mlflow.tracking_uri)
    model = mlflow.pyfunc.load_model("models:/deepsummit@champion")
    answers = model.predict(pd.DataFrame(rows).drop(columns=["climber_id", "season"]))

    expected = [day.members[1] for day in checked]
    np.testing.assert_allclose(
        answers[["probability", "probability_low", "probability_high"]].to_numpy(dtype=float),
        np.array(expected),
        atol=1e-6,  # float32 scores: another batch composition moves the last bits
    )


def test_the_outlooks_table_holds_each_member_and_the_team_once_per_forecast_and_model(
    forecast_home, tmp_path: Path
) -> None:
    settings, _ = forecast_home
    first = plan_outlook(settings, RunContext(tmp_path))
    plan_outlook(settings, RunContext(tmp_path))  # the same forecast and model again

    with connect(settings.paths.warehouse, read_only=True) as con:
        rows = con.sql("SELECT * FROM outlooks").pl()
    assert first.rows == rows.height == 16 * (12 + 1)
    team_rows = rows.filter(member=TEAM).sort("push_day")
    assert team_rows["probability"].to_list() == pytest.approx(
        [d.expected for d in first.peaks[0].days]
    )
    assert set(rows["model_version"]) == {first.model_version}
    assert set(rows["weather_source"]) == {first.peaks[0].weather_source}
    assert rows["issued_at"].n_unique() == 1


def test_a_day_beyond_the_forecast_horizon_is_one_line(forecast_home, tmp_path: Path) -> None:
    _, overrides = forecast_home
    late = today("Asia/Kathmandu") + dt.timedelta(days=5)
    settings = with_outlook(overrides, first_day=late.isoformat(), days=14)
    with pytest.raises(PipelineError, match=r"EVER: push day .* is beyond the forecast horizon"):
        plan_outlook(settings, RunContext(tmp_path))


def test_a_window_reaching_before_the_forecast_is_one_line(forecast_home, tmp_path) -> None:
    _, overrides = forecast_home
    early = today("Asia/Kathmandu") - dt.timedelta(days=10)
    settings = with_outlook(overrides, first_day=early.isoformat())
    with pytest.raises(PipelineError, match=r"needs weather from .*; the forecast .* starts"):
        plan_outlook(settings, RunContext(tmp_path))


def test_an_unknown_agency_is_scored_as_unknown_with_a_note(forecast_home, tmp_path) -> None:
    _, overrides = forecast_home
    settings = with_outlook(overrides, agency="Nobody Ever Treks", days=3)
    report = plan_outlook(settings, RunContext(tmp_path))
    notes = report.peaks[0].notes
    prior = "agency 'Nobody Ever Treks' has no expedition in the records: its success rate is "
    assert f"{prior}the prior" in notes
    if "agency" in settings.features.model_inputs().names:  # the token, where configured
        assert "agency 'Nobody Ever Treks' is not in the training vocabulary: unknown" in notes
    assert "agency 'Nobody Ever Treks'" in report.render()


def test_a_peak_without_a_stored_forecast_says_so(forecast_home, tmp_path: Path) -> None:
    _, overrides = forecast_home
    settings = with_outlook(overrides, peaks=["EVER", "LHOT"])
    with pytest.raises(PipelineError, match="no forecast stored for LHOT"):
        plan_outlook(settings, RunContext(tmp_path))


def test_a_peak_without_trusted_coordinates_is_one_line_or_answered_without_weather(
    forecast_home, tmp_path: Path
) -> None:
    """CHUR has no coordinates: no forecast can exist for it. Asked plainly, one line says why
    and how to ask; asked with --without-weather, the plan's P without weather beside EVER's
    forecast outlook, and the outlooks table keeps EVER's forecast rows only."""
    _, overrides = forecast_home
    plain = with_outlook(overrides, peaks=["EVER", "CHUR"], days=3)
    with pytest.raises(PipelineError) as error:
        plan_outlook(plain, RunContext(tmp_path))
    message = str(error.value)
    assert "CHUR: no day-by-day outlook, there are no trusted coordinates" in message
    assert "--without-weather" in message and "\n" not in message

    settings = with_outlook(overrides, peaks=["EVER", "CHUR"], days=3, without_weather=True)
    report = plan_outlook(settings, RunContext(tmp_path))
    ever, chur = report.peaks
    assert ever.weather_source.startswith("forecast@") and chur.weather_source == NO_WEATHER_SOURCE
    assert any("CHUR: no day-by-day outlook" in note for note in chur.notes)
    assert any("the weather took no part" in note for note in chur.notes)
    assert not any("the weather took no part" in note for note in ever.notes)
    assert report.rows == 3 * (12 + 1)  # EVER's days only
    assert "without weather the days differ by the calendar only" in report.render()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name,age\nA,40\nB,abc\n", r"line 3: age: Input should be a valid number"),
        ("name,age,sex\nA,40,X\n", r"line 2: sex: Input should be 'M' or 'F'"),
        ("name,height\nA,180\n", r"columns must be among name, age, .*; found name, height"),
        ("name,age\n", r"no members"),
    ],
)
def test_a_bad_team_file_is_one_line_naming_the_line(tmp_path: Path, text, message) -> None:
    path = tmp_path / "team.csv"
    path.write_text(text)
    with pytest.raises(PipelineError, match=message):
        read_team(path)


def test_the_example_team_file_is_the_twelve_member_team(tmp_path: Path) -> None:
    shutil.copy(TEAM_FILE, tmp_path / "team.csv")
    members = read_team(tmp_path / "team.csv")
    assert len(members) == 12 and sum(m.hired for m in members) == 4
