"""`deepsummit outlook --as-of`: the outlook a team would have seen on a past morning, by the
champion, from the stored archive weather; the same answers as `predict` for each planned
attempt, nothing written to the outlooks table, one line for a date outside the stored
weather; a drift note only for weather unlike the training windows of the same season and
weeks."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
from training_fixtures import TrainedRegistry

from deepsummit.contracts.artifact import ModelArtifact
from deepsummit.core.config import Settings, load_settings
from deepsummit.core.context import RunContext
from deepsummit.core.errors import PipelineError
from deepsummit.core.planned import planned_record
from deepsummit.core.warehouse import connect
from deepsummit.serve.outlook import read_team
from deepsummit.serve.predict import daily_weather
from deepsummit.serve.stage import replay_outlook

pytest_plugins = ["features_fixtures", "training_fixtures"]

TEAM_FILE = Path(__file__).parents[2] / "deployments" / "outlook-team.csv"
AS_OF = dt.date(2019, 5, 10)


def replay_settings(
    registry: TrainedRegistry, bundle_features, warehouse: Path | None = None, **outlook
) -> Settings:
    return load_settings(
        "tiny",
        {
            **registry.settings.model_dump(mode="json", include={"mlflow", "features"}),
            "paths": {"warehouse": str(warehouse or bundle_features[0].paths.warehouse)},
            "weather": {"source": "archive"},
            "outlook": {"peaks": ["EVER"], "team_file": str(TEAM_FILE), **outlook},
        },
    )


def test_a_past_morning_is_scored_as_predict_scores_each_attempt(
    trained_registry: TrainedRegistry, bundle_features, tmp_path: Path
) -> None:
    settings = replay_settings(trained_registry, bundle_features, as_of=str(AS_OF), days=12)
    report = replay_outlook(settings, RunContext(tmp_path))
    (peak,) = report.peaks
    assert [d.day for d in peak.days] == [AS_OF + dt.timedelta(days=i) for i in range(12)]
    assert peak.weather_source == "archive"
    assert report.rows == 0  # the outlooks table keeps forecasts only
    assert report.chart is not None and report.chart.exists()

    member = read_team(TEAM_FILE)[0]
    checked = [peak.days[0], peak.days[-1]]
    with connect(settings.paths.warehouse, read_only=True) as con:
        assert "outlooks" not in con.sql("SHOW TABLES").pl()["name"].to_list()
        rows = [
            {
                **planned_record(
                    {
                        "peak": "EVER",
                        "push_date": day.day,
                        **member.model_dump(exclude={"name"}, exclude_none=True),
                        "team_size": 12,
                        "weather_source": "archive",
                    }
                ),
                **daily_weather(con, "EVER", day.day, "archive"),
            }
            for day in checked
        ]
    mlflow.set_tracking_uri(settings.mlflow.tracking_uri)
    model = mlflow.pyfunc.load_model("models:/deepsummit@champion")
    answers = model.predict(pd.DataFrame(rows).drop(columns=["climber_id", "season"]))
    np.testing.assert_allclose(
        answers[["probability", "probability_low", "probability_high"]].to_numpy(dtype=float),
        np.array([day.members[0] for day in checked]),
        atol=1e-6,
    )


@pytest.mark.parametrize(
    ("as_of", "message"),
    [
        ("2035-05-10", r"EVER: no weather of 'archive' stored for the windows of 2035-05-10"),
        ("1900-05-10", r"EVER: no weather of 'archive' stored for the windows of 1900-05-10"),
    ],
)
def test_a_date_outside_the_stored_weather_is_one_line(
    trained_registry: TrainedRegistry, bundle_features, tmp_path: Path, as_of: str, message: str
) -> None:
    settings = replay_settings(trained_registry, bundle_features, as_of=as_of)
    with pytest.raises(PipelineError, match=message):
        replay_outlook(settings, RunContext(tmp_path))


def test_the_last_stored_day_bounds_the_candidate_days(
    trained_registry: TrainedRegistry, bundle_features, tmp_path: Path
) -> None:
    with connect(bundle_features[0].paths.warehouse, read_only=True) as con:
        [(last,)] = con.sql(
            "SELECT max(date) FROM weather_daily WHERE peakid = 'EVER' AND source = 'archive'"
        ).fetchall()
    as_of = last - dt.timedelta(days=3)
    settings = replay_settings(trained_registry, bundle_features, as_of=str(as_of), days=10)
    with pytest.raises(
        PipelineError, match=rf"is beyond the stored weather of archive \({last}, archive\)"
    ):
        replay_outlook(settings, RunContext(tmp_path))


def test_an_ordinary_may_morning_raises_no_drift_note(
    trained_registry: TrainedRegistry, bundle_features, tmp_path: Path
) -> None:
    """The replay's windows are compared with the training windows of spring weeks around
    mid-May, not with every season's: May is no drift."""
    settings = replay_settings(trained_registry, bundle_features, as_of=str(AS_OF))
    report = replay_outlook(settings, RunContext(tmp_path))
    assert report.drift is not None
    assert report.drift.warning() is None
    assert "the same season and push weeks (Spring weeks 16–24" in report.drift.reference
    assert [r for r in report.drift.rows if r.shift_sd is not None]  # the weather was judged
    assert "input drift" not in report.render()


def test_a_window_several_deviations_colder_is_named_in_the_drift_note(
    trained_registry: TrainedRegistry, bundle_features, tmp_path: Path
) -> None:
    warehouse = tmp_path / "colder.duckdb"
    shutil.copy(bundle_features[0].paths.warehouse, warehouse)
    reference = ModelArtifact.load(trained_registry.model_dir).drift_reference
    colder = 5 * reference.numeric["temperature_2m_min"].sd  # every season's: wider than May's
    with connect(warehouse) as con:
        con.execute(
            "UPDATE weather_daily SET temperature_2m_min = temperature_2m_min - ? "
            "WHERE peakid = 'EVER' AND source = 'archive' AND date BETWEEN ? AND ?",
            [colder, AS_OF - dt.timedelta(days=120), AS_OF + dt.timedelta(days=30)],
        )
    settings = replay_settings(trained_registry, bundle_features, warehouse, as_of=str(AS_OF))
    report = replay_outlook(settings, RunContext(tmp_path))
    assert report.drift is not None and report.drift.drifted == ("temperature_2m_min",)
    note = report.drift.warning()
    assert note is not None and "temperature_2m_min -" in note and " SD" in note
    assert f"note: {note}" in report.render()
