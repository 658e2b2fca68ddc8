"""`deepsummit predict` as a thin client of the registered model, and the model as any MLflow
client loads it: a fresh process, files that hold no pickle, tensors read as tensors only."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import mlflow
import numpy as np
import polars as pl
import pytest
from training_fixtures import TrainedRegistry

from deepsummit.contracts.artifact import ModelArtifact
from deepsummit.contracts.member_groups import AGE_BAND_STARTS
from deepsummit.contracts.snapshot import PLANNED_TEST_FILE
from deepsummit.contracts.tensors import load_tensors
from deepsummit.core.errors import BadInput, PipelineError
from deepsummit.core.planned import KEY_COLUMNS, planned_record, season_of
from deepsummit.serve.predict import predict_attempt, push_weather
from deepsummit.serve.scoring import weather_token_names

pytest_plugins = ["features_fixtures", "training_fixtures"]

FRESH_PROCESS = """
import json, sys
import mlflow, pandas as pd
model = mlflow.pyfunc.load_model("models:/deepsummit@champion")
print(json.dumps([float(p) for p in model.predict(pd.read_parquet(sys.argv[1]))["probability"]]))
"""


def test_weather_tokens_are_named_by_scale_and_days() -> None:
    names = weather_token_names()
    assert len(names) == 26
    assert names[0] == "weather 1d D-6" and names[6] == "weather 1d D"
    assert names[7] == "weather 3d D-29…D-27" and names[16] == "weather 3d D-2…D"
    assert names[17] == "weather 10d D-89…D-80" and names[25] == "weather 10d D-9…D"


def test_the_champion_predicts_in_a_fresh_process(
    trained_registry: TrainedRegistry, tmp_path: Path
) -> None:
    rows = pl.read_parquet(trained_registry.snapshot / PLANNED_TEST_FILE).head(50)
    rows.drop(KEY_COLUMNS).write_parquet(tmp_path / "rows.parquet")
    mlflow.set_tracking_uri(trained_registry.settings.mlflow.tracking_uri)
    in_process = mlflow.pyfunc.load_model("models:/deepsummit/1").predict(
        rows.drop(KEY_COLUMNS).to_pandas()
    )["probability"]

    completed = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS, str(tmp_path / "rows.parquet")],
        cwd=tmp_path,  # nothing importable from the checkout's folder: the package must do
        env={**os.environ, "MLFLOW_TRACKING_URI": trained_registry.settings.mlflow.tracking_uri},
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert completed.returncode == 0, completed.stderr[-2000:]
    predicted = np.array(json.loads(completed.stdout.strip().splitlines()[-1]))
    np.testing.assert_allclose(predicted, in_process.to_numpy(dtype=float), atol=1e-9)


def test_the_logged_model_holds_no_pickle_and_its_weights_load_as_tensors_only(
    trained_registry: TrainedRegistry, tmp_path: Path
) -> None:
    mlflow.set_tracking_uri(trained_registry.settings.mlflow.tracking_uri)
    local = Path(mlflow.artifacts.download_artifacts("models:/deepsummit/1", dst_path=tmp_path))
    files = [path for path in local.rglob("*") if path.is_file()]
    assert not [path for path in files if path.suffix in (".pkl", ".pickle", ".cloudpickle")]
    assert "python_model.pkl" not in (local / "MLmodel").read_text()
    weights = [path for path in files if path.parent.name == "weights"]
    assert len(weights) == trained_registry.settings.train.seeds
    for path in weights:
        assert all(hasattr(tensor, "shape") for tensor in load_tensors(path).values())


@pytest.fixture(scope="module")
def predict_settings(trained_registry: TrainedRegistry, bundle_features):
    """The champion of the registry fixture, and the warehouse its features were built from."""
    features_settings, _, _ = bundle_features
    return trained_registry.settings.model_copy(update={"paths": features_settings.paths})


def everest(**changes: object) -> dict[str, object]:
    attempt = dict(
        peak="EVER",
        push_date=dt.date(2019, 5, 20),
        age=35,
        sex="M",
        nationality="USA",
        team_size=12,
        staff_size=14,
        oxygen=True,
        commercial=True,
        route="W Ridge",
        style="Standard",
        agency="Nobody Ever Heard Of Us",
    )
    return {**attempt, **changes}


def test_a_planned_attempt_gets_a_probability_its_band_and_named_tokens(predict_settings):
    prediction = predict_attempt(predict_settings, everest())
    assert prediction.low <= prediction.probability <= prediction.high
    assert 0.0 < prediction.probability < 1.0
    assert season_of(prediction.attempt) == "Spring"
    tokens = [token for token in prediction.top_tokens.split(";") if token.strip()]
    assert len(tokens) == 5
    assert (
        "agency 'Nobody Ever Heard Of Us' has no expedition in the records: its success rate "
        "is the prior" in prediction.notes
    )
    assert prediction.model_version == "1" and prediction.weather_source == "archive"
    text = prediction.render()
    assert "P(summit)" in text and "band" in text and "ensemble members" in text
    # The registry's versions serve a blend (tests/training_fixtures.py): predict names its parts.
    assert prediction.answered_by.startswith("transformer 0.") and "+ " in prediction.answered_by
    assert f"answered by: {prediction.answered_by}" in text


def test_predict_shows_what_the_member_changes_and_where_the_model_is_least_sure(
    predict_settings, trained_registry
) -> None:
    """Beside the answer: the same attempt asked at the start of every age band and as the
    other sex, each the model's own answer to that request; and the member's groups where the
    held-out member check found the model furthest from the summit rate."""
    prediction = predict_attempt(predict_settings, everest(age=63))
    assert list(prediction.by_member) == [*(f"age {age}" for age in AGE_BAND_STARTS), "as F"]
    # The same numbers as asking for them one by one, to the last bit (in one batch of the
    # changes, each could differ from the model's answer to it alone by 1e-9).
    at_sixty = predict_attempt(predict_settings, everest(age=60)).probability
    assert prediction.by_member["age 60"] == at_sixty
    as_woman = predict_attempt(predict_settings, everest(age=63, sex="F")).probability
    assert prediction.by_member["as F"] == as_woman
    groups = {(g["family"], g["group"]) for g in prediction.least_sure}
    assert 1 <= len(groups) <= 2
    stored = ModelArtifact.load(trained_registry.model_dir).member_groups
    mine = {
        ("age", "60 and over"), ("sex", "M"), ("hired staff", "not hired"),
        ("oxygen plan", "oxygen planned"), ("role", "climber"), ("nationality", "other"),
    }  # fmt: skip
    counted = {
        (r["family"], r["group"]): abs(r["gap"]["transformer"]["estimate"])
        for r in stored["rows"]
        if r["counted"]
    }
    largest = max((counted[g], g) for g in mine if g in counted)[1]
    assert largest in groups
    text = prediction.render()
    assert "age 20" in text and "least sure" in text
    document = prediction.as_dict()
    assert document["by_member"] == prediction.by_member
    assert document["least_sure"] == prediction.least_sure


def test_predict_is_the_registered_model_s_own_answer(predict_settings, trained_registry):
    """The CLI client adds the warehouse's weather and asks the model; asked directly with the
    same request, the model gives the same number."""
    planned = everest(agency=None)
    prediction = predict_attempt(predict_settings, planned)
    from deepsummit.core.warehouse import connect
    from deepsummit.serve.predict import daily_weather

    with connect(predict_settings.paths.warehouse, read_only=True) as con:
        weather = daily_weather(con, "EVER", planned["push_date"], "archive")
    request = {**planned_record(planned), **weather}
    mlflow.set_tracking_uri(trained_registry.settings.mlflow.tracking_uri)
    direct = mlflow.pyfunc.load_model("models:/deepsummit/1").predict(
        pl.DataFrame([request]).to_pandas()
    )
    assert prediction.probability == pytest.approx(direct["probability"][0], abs=1e-12)


def test_a_peak_without_weather_is_answered_with_the_weather_absent(predict_settings) -> None:
    """Ama Dablam has no archive weather: the answer is the model's without the weather token
    (as its attempts were trained), and says so, rather than an error or a borrowed series."""
    prediction = predict_attempt(predict_settings, everest(peak="AMAD", route="SW Ridge"))
    assert not prediction.weather_used
    assert 0.0 < prediction.probability < 1.0
    assert "no weather of AMAD in source 'archive'" in prediction.notes
    assert "without weather: the weather took no part" in prediction.render()
    assert not any(token.startswith("weather") for token in prediction.top_tokens.split("; "))
    assert predict_attempt(predict_settings, everest()).weather_used


def test_only_the_champions_source_must_have_the_whole_window() -> None:
    """Every source's window is read while the warehouse is open, before the champion is known:
    one with days missing fails the request only when the champion reads it."""
    planned = {"peak": "EVER"}
    window = {"temperature_2m_mean": [1.0] * 90}
    windows = {"archive": window, "open-meteo": BadInput("no weather for EVER: 3 days missing")}
    assert push_weather(planned, "archive", windows) == (window, "")
    with pytest.raises(BadInput, match="3 days missing"):
        push_weather(planned, "open-meteo", windows)
    assert push_weather(planned, "forecast", windows) == (
        {},
        "no weather of EVER in source 'forecast'",
    )


def test_a_rarely_climbed_peak_is_answered_with_a_note_on_its_shared_token(
    predict_settings,
) -> None:
    prediction = predict_attempt(predict_settings, everest(peak="CHUR", route=None))
    assert "peakid 'CHUR' is seen too rarely in the training records" in prediction.notes
    assert "'rare peakid: 7000–7499 m'" in prediction.notes


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"peak": "XXXX"}, "unknown peak 'XXXX'"),
        ({"age": 300}, "age 300: not in 1..100"),
        ({"nationality": "Atlantis"}, "unknown nationality 'Atlantis'"),
        ({"push_date": dt.date(1935, 5, 20)}, "no weather for EVER on 1935-05-20"),
        ({"push_date": dt.date(1900, 5, 20)}, "push_date 1900-05-20: before the records' first"),
        ({"push_date": dt.date(2999, 5, 20)}, "push_date 2999-05-20: in the future"),
    ],
)
def test_bad_input_gets_one_clear_line(predict_settings, changes, message) -> None:
    with pytest.raises(PipelineError) as error:
        predict_attempt(predict_settings, everest(**changes))
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_bad_input_is_refused_before_the_registry_is_asked(predict_settings, tmp_path) -> None:
    # An empty registry: had predict looked up the champion first, bad input would read
    # "no model" instead of naming what is wrong with it.
    offline = predict_settings.model_copy(
        update={
            "mlflow": predict_settings.mlflow.model_copy(
                update={"tracking_uri": f"sqlite:///{tmp_path / 'empty.db'}"}
            )
        }
    )
    with pytest.raises(PipelineError, match="unknown nationality 'Atlantis'"):
        predict_attempt(offline, everest(nationality="Atlantis"))
    with pytest.raises(PipelineError, match="age 300"):
        predict_attempt(offline, everest(age=300))
    with pytest.raises(PipelineError, match=r"no model .*@champion"):
        predict_attempt(offline, everest())
