"""The registered pyfunc in a fresh process, its files, and scoring planned attempts."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import mlflow
import numpy as np
import polars as pl
import pytest
from features_tables import load_bundle
from training_fixtures import (
    TrainedRegistry,
    trained_registry_fixture,  # noqa: F401 (the fixture)
)

from pipeline.errors import PipelineError
from pipeline.features.build import SNAPSHOT_FILE, load_features
from pipeline.serve.predict import PlannedAttempt, predict_attempt
from pipeline.serve.pyfunc import TOKEN_NAMES, weather_token_names
from pipeline.train.artifact import ModelFiles, load_tensors, model_input_frame, split_model_input
from pipeline.train.trainer import predict_proba

FRESH_PROCESS = """
import json, sys
import mlflow, pandas as pd
model = mlflow.pyfunc.load_model("models:/deepsummit@champion")
print(json.dumps([float(p) for p in model.predict(pd.read_parquet(sys.argv[1]))]))
"""


def test_weather_tokens_are_named_by_scale_and_days() -> None:
    names = weather_token_names()
    assert len(names) == 26
    assert names[0] == "weather 1d D-6" and names[6] == "weather 1d D"
    assert names[7] == "weather 3d D-29…D-27" and names[16] == "weather 3d D-2…D"
    assert names[17] == "weather 10d D-89…D-80" and names[25] == "weather 10d D-9…D"
    assert len(TOKEN_NAMES) == 47 and TOKEN_NAMES[1] == "age"


def test_the_input_layout_round_trips_to_the_training_arrays(
    trained_registry: TrainedRegistry,
) -> None:
    arrays, preprocessor = load_features(trained_registry.features_dir)
    rows = pl.read_parquet(trained_registry.features_dir / SNAPSHOT_FILE)
    test_rows = rows.filter(pl.col("split") == "test")
    frame = model_input_frame(test_rows, arrays["test"], preprocessor)
    again = preprocessor.transform(*split_model_input(frame))
    for name, expected in arrays["test"].model_inputs().items():
        np.testing.assert_allclose(getattr(again, name), expected, atol=1e-4, err_msg=name)


def test_the_champion_predicts_in_a_fresh_process(
    trained_registry: TrainedRegistry, tmp_path: Path
) -> None:
    arrays, preprocessor = load_features(trained_registry.features_dir)
    rows = pl.read_parquet(trained_registry.features_dir / SNAPSHOT_FILE)
    frame = model_input_frame(rows.filter(pl.col("split") == "test"), arrays["test"], preprocessor)
    frame.to_parquet(tmp_path / "rows.parquet")
    model, _ = ModelFiles.in_directory(trained_registry.model_dir).load()
    expected = predict_proba(model, arrays["test"])

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
    np.testing.assert_allclose(predicted, expected, atol=1e-5)


def test_the_logged_model_holds_no_pickle_and_its_weights_load_as_tensors_only(
    trained_registry: TrainedRegistry, tmp_path: Path
) -> None:
    mlflow.set_tracking_uri(trained_registry.settings.mlflow.tracking_uri)
    local = Path(mlflow.artifacts.download_artifacts("models:/deepsummit/1", dst_path=tmp_path))
    files = [path for path in local.rglob("*") if path.is_file()]
    assert not [path for path in files if path.suffix in (".pkl", ".pickle", ".cloudpickle")]
    mlmodel = (local / "MLmodel").read_text()
    assert "python_model.pkl" not in mlmodel
    (weights,) = [path for path in files if path.name == "weights.pt"]
    assert all(hasattr(tensor, "shape") for tensor in load_tensors(weights).values())


@pytest.fixture(scope="module")
def predict_settings(trained_registry: TrainedRegistry, tmp_path_factory):
    """The champion of the registry fixture, and a warehouse holding the whole bundle."""
    warehouse = tmp_path_factory.mktemp("warehouse") / "w.duckdb"
    con = duckdb.connect(str(warehouse))
    load_bundle(con)
    con.close()
    return trained_registry.settings.model_copy(
        update={
            "paths": trained_registry.settings.paths.model_copy(update={"warehouse": warehouse})
        }
    )


def everest(**changes: object) -> PlannedAttempt:
    attempt = dict(
        peakid="EVER",
        date=dt.date(2019, 5, 20),
        age=35,
        sex="M",
        nationality="USA",
        team_size=12,
        oxygen=True,
        commercial=True,
        route="W Ridge",  # not in the champion's (synthetic) vocabulary
        style="Standard",
    )
    return PlannedAttempt(**{**attempt, **changes})


def test_a_planned_attempt_gets_a_probability_and_named_tokens(predict_settings) -> None:
    prediction = predict_attempt(predict_settings, everest())
    assert 0.0 < prediction.probability < 1.0
    assert prediction.attempt.season == "Spring"
    assert len(prediction.top_tokens) == 5
    shares = [share for _, share in prediction.top_tokens]
    assert shares == sorted(shares, reverse=True) and 0 < sum(shares) <= 1.0 + 1e-6
    assert all(name in TOKEN_NAMES[1:] for name, _ in prediction.top_tokens)
    assert any("route1: 'W Ridge'" in note for note in prediction.notes)
    assert prediction.model_version == "1"
    assert "P(summit)" in prediction.render()


def test_a_younger_climber_scores_higher_with_the_age_trained_champion(predict_settings) -> None:
    # The synthetic label falls with age: the champion learnt it, the feature code carries it.
    young = predict_attempt(predict_settings, everest(age=20)).probability
    old = predict_attempt(predict_settings, everest(age=70)).probability
    assert young > old


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"peakid": "XXXX"}, "unknown peak 'XXXX'"),
        ({"age": 300}, "age 300: not in 1..100"),
        ({"nationality": "Atlantis"}, "unknown nationality 'Atlantis'"),
        ({"date": dt.date(1935, 5, 20)}, "no weather for EVER on 1935-05-20"),
        ({"peakid": "AMAD"}, "no weather for AMAD"),
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
    with pytest.raises(PipelineError, match=r"no model .*@champion"):
        predict_attempt(offline, everest())
