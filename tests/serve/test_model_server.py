"""The registered champion served as any MLflow user serves a model: `mlflow models serve -m
models:/deepsummit@champion --env-manager local`, asked over HTTP with a JSON POST to
/invocations. Good rows get the model's probability (the same as loading the model in process);
a request with a row the model cannot answer is refused whole, with a 400 and one line naming
the row and why (deepsummit/serve/model_input.py), while other askers are answered."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import polars as pl
import pytest
from services_fixtures import free_port
from training_fixtures import TrainedRegistry

from deepsummit.contracts.snapshot import PLANNED_TEST_FILE
from deepsummit.core.planned import KEY_COLUMNS
from deepsummit.serve.scoring import WEATHER_ABSENT_NOTE

pytest_plugins = ["features_fixtures", "training_fixtures"]

MLFLOW = str(Path(sys.executable).parent / "mlflow")


@pytest.fixture(scope="module")
def served(trained_registry: TrainedRegistry, tmp_path_factory) -> Iterator[str]:
    """The champion behind `mlflow models serve`; its base URL."""
    port = free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": trained_registry.settings.mlflow.tracking_uri,
        # Two dozen askers at once share a loaded CI machine's cores: the last may wait longer
        # than MLflow's 60 s for its answer, and get a 504 for it.
        "MLFLOW_SCORING_SERVER_REQUEST_TIMEOUT": "600",
        # as in an activated venv: MLflow starts the venv's uvicorn by name
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    with log.open("w") as output:
        server = subprocess.Popen(
            [MLFLOW, "models", "serve", "-m", "models:/deepsummit@champion",
             "--env-manager", "local", "--host", "127.0.0.1", "--port", str(port)],
            env=env, stdout=output, stderr=subprocess.STDOUT,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"{url}/ping", timeout=2):
                    break
            except (urllib.error.URLError, OSError):
                if server.poll() is not None or time.monotonic() > deadline:
                    message = f"mlflow models serve did not start:\n{log.read_text()}"
                    raise AssertionError(message) from None
                time.sleep(1)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


def invoke(url: str, records: list[dict[str, Any]]) -> tuple[int, Any]:
    """POST `records`; NaN and infinity are written as Python's json writes them (NaN,
    Infinity: not standard JSON, but what MLflow's parser reads)."""
    body = json.dumps({"dataframe_records": records}).encode()
    request = urllib.request.Request(
        f"{url}/invocations", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def planned_rows(registry: TrainedRegistry, n: int | None = None) -> list[dict[str, Any]]:
    """Test-split attempts in the model's input layout (JSON: NaN as null); the weather days of
    an attempt on a peak without weather are all null."""
    frame = pl.read_parquet(registry.snapshot / PLANNED_TEST_FILE).drop(KEY_COLUMNS)
    frame = frame if n is None else frame.head(n)
    return json.loads(frame.write_json())


def test_planned_attempts_are_answered_over_http(served: str, trained_registry) -> None:
    rows = planned_rows(trained_registry, 20)
    status, answer = invoke(served, rows)

    assert status == 200, answer
    predictions = answer["predictions"]
    assert len(predictions) == 20
    mlflow.set_tracking_uri(trained_registry.settings.mlflow.tracking_uri)
    model = mlflow.pyfunc.load_model("models:/deepsummit@champion")
    frame = pl.read_parquet(trained_registry.snapshot / PLANNED_TEST_FILE).head(20)
    in_process = model.predict(frame.drop(KEY_COLUMNS).to_pandas())
    np.testing.assert_allclose(
        [p["probability"] for p in predictions],
        in_process["probability"].to_numpy(dtype=float),
        atol=1e-9,
    )
    assert all(
        p["probability_low"] <= p["probability"] <= p["probability_high"] for p in predictions
    )
    assert not any(p.get("error") for p in predictions)


ASKERS = 16


def malformed_bodies(good: dict[str, Any]) -> dict[str, tuple[list[dict[str, Any]], str]]:
    """Bodies of two rows, `good` first and then one malformed in one way, by kind, with how
    the refusal's one line starts. MLflow refuses a value it cannot convert to the column's
    type itself, naming the column; the model's refusal names the row and why."""
    misnamed = {k: v for k, v in good.items() if k != "peak"} | {"peak_id": good["peak"]}
    short = {name: values[:80] for name, values in good.items() if isinstance(values, list)}
    kinds = {
        "a column misnamed": (misnamed, "row 1: peak: required"),
        "text that is a number": ({**good, "route": 7}, "row 1: route 7: not text"),
        "a number that is text": (
            {**good, "age": "old"},
            "Invalid input. Data is not compatible with model signature. "
            "Failed to convert column age",
        ),
        "NaN for a required date": (
            {**good, "push_date": math.nan},
            "row 1: push_date: required (YYYY-MM-DD)",
        ),
        "an infinite number": (
            {**good, "team_size": math.inf},
            "row 1: team_size inf: not a finite number",
        ),
        "an unknown peak": (
            {**good, "peak": "XXXX"},
            "row 1: unknown peak 'XXXX': not in the records the model was trained with",
        ),
        "an age out of range": ({**good, "age": 300.0}, "row 1: age 300: not in 1..100"),
        "an impossible date": (
            {**good, "push_date": "2019-02-30"},
            "row 1: push_date '2019-02-30': not a date YYYY-MM-DD",
        ),
        "80 days of weather": (
            {**good, **short},
            "row 1: temperature_2m_mean: 80 daily values, expected 90 (D-89 … D)",
        ),
    }
    return {kind: ([good, row], line) for kind, (row, line) in kinds.items()}


def test_under_16_askers_each_malformed_body_is_refused_in_one_line_and_the_rest_answered(
    served: str, trained_registry
) -> None:
    rows = planned_rows(trained_registry, 2 * ASKERS)
    asked = [rows[2 * asker : 2 * asker + 2] for asker in range(ASKERS)]
    malformed = malformed_bodies(rows[0])
    bodies = asked + [body for body, _ in malformed.values()]
    together = threading.Barrier(len(bodies))

    def ask(body: list[dict[str, Any]]) -> tuple[int, Any]:
        together.wait()  # every asker sends at once, each on its own connection
        return invoke(served, body)

    with ThreadPoolExecutor(len(bodies)) as pool:
        replies = list(pool.map(ask, bodies))

    for (kind, (_, line)), (status, answer) in zip(
        malformed.items(), replies[ASKERS:], strict=True
    ):
        assert status == 400, (kind, answer)
        assert answer["message"].startswith(line), (kind, answer["message"])
        assert "\n" not in answer["message"], (kind, answer["message"])
    mlflow.set_tracking_uri(trained_registry.settings.mlflow.tracking_uri)
    model = mlflow.pyfunc.load_model("models:/deepsummit@champion")
    frame = pl.read_parquet(trained_registry.snapshot / PLANNED_TEST_FILE).drop(KEY_COLUMNS)
    for asker, (status, answer) in enumerate(replies[:ASKERS]):
        assert status == 200, answer
        in_process = model.predict(frame.slice(2 * asker, 2).to_pandas())
        np.testing.assert_allclose(
            [p["probability"] for p in answer["predictions"]],
            in_process["probability"].to_numpy(dtype=float),
            atol=1e-9,
        )


def test_a_peak_without_weather_is_answered_and_says_the_weather_took_no_part(
    served: str, trained_registry
) -> None:
    good = next(
        row for row in planned_rows(trained_registry) if row["temperature_2m_mean"][0] is not None
    )
    no_weather = {name: None for name, values in good.items() if isinstance(values, list)}
    status, answer = invoke(served, [good, {**good, **no_weather, "peak": "AMAD", "route": None}])

    assert status == 200, answer
    with_weather, without = answer["predictions"]
    assert with_weather["weather_used"] is True
    assert without["error"] is None and 0 < without["probability"] < 1
    assert without["weather_used"] is False
    assert WEATHER_ABSENT_NOTE in without["notes"]


def test_a_request_without_a_required_column_is_refused_with_the_schema_s_reason(
    served: str, trained_registry
) -> None:
    good, *_ = planned_rows(trained_registry, 1)
    status, answer = invoke(served, [{k: v for k, v in good.items() if k != "push_date"}])
    assert status == 400
    assert "push_date" in answer["message"]
