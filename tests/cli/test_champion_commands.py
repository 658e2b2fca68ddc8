"""The commands that read the champion, run as a script runs them, against a real MLflow tracking
server: `predict --json` and `outlook --json` print one JSON document and nothing else on stdout,
with the numbers of the Python API; a second `predict` scores the champion's verified copy and
imports no MLflow; `--version` names the champion."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from flows_fixtures import as_environment, isolated_paths
from services_fixtures import STARTUP_TIMEOUT_S, free_port, running_scorer, wait_champion_loaded
from training_fixtures import TrainedRegistry

from deepsummit.cli.exit_codes import ExitCode
from deepsummit.core.config import deep_merge, load_settings
from deepsummit.core.sections import PROJECT_ROOT
from deepsummit.serve.predict import predict_attempt
from deepsummit.services import supervisor as services

pytest_plugins = ["features_fixtures", "training_fixtures"]
pytestmark = pytest.mark.long

TEAM_FILE = PROJECT_ROOT / "deployments" / "outlook-team.csv"
EVEREST = {"peak": "EVER", "push_date": dt.date(2019, 5, 20), "age": 35, "nationality": "USA"}
EVEREST_OPTIONS = ("--peak", "EVER", "--push-date", "2019-05-20", "--age", "35")


@pytest.fixture(scope="module")
def tracking_server(
    trained_registry: TrainedRegistry, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The registry fixture's store behind an MLflow tracking server, as `deepsummit up` runs
    one (its folder as var/, where `up`'s server finds its database)."""
    run_dir = tmp_path_factory.mktemp("tracking") / "services"
    paths = {"var_dir": str(trained_registry.root)}
    services_config = {"run_dir": str(run_dir), "mlflow_port": free_port()}
    settings = load_settings(overrides={"paths": paths, "services": services_config})
    services.start_service(settings, services.MLFLOW_SERVER, STARTUP_TIMEOUT_S)
    yield settings.services.mlflow_url
    services.down(settings)


@pytest.fixture(scope="module")
def overrides(
    tracking_server: str, bundle_features, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """Settings of a user of that server and of the bundle's warehouse (no local services)."""
    root = tmp_path_factory.mktemp("user")
    settings = isolated_paths(root)
    settings["paths"]["warehouse"] = str(bundle_features[0].paths.warehouse)
    settings["services"].update(prefect_port=free_port(), mlflow_port=free_port())
    settings["mlflow"] = {"tracking_uri": tracking_server, "model_cache_dir": str(root / "cache")}
    return settings


def cli(
    overrides: dict[str, Any],
    *args: str,
    python: tuple[str, ...] = (),
    program: tuple[str, ...] = ("-m", "deepsummit.cli.app"),
    exit_code: int = 0,
) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "DEEPSUMMIT_"))}
    result = subprocess.run(
        [sys.executable, *python, *program, *args],
        env={**env, **as_environment(overrides)},
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == exit_code, result.stderr[-3000:]
    return result


def imported_modules(importtime_stderr: str) -> set[str]:
    """The modules a process ran with `-X importtime` imported, from its stderr."""
    return {
        line.rsplit("|", 1)[-1].strip()
        for line in importtime_stderr.splitlines()
        if line.startswith("import time:")
    }


def test_predict_json_is_the_prediction_and_a_second_call_imports_no_mlflow_nor_prefect(
    overrides,
) -> None:
    first = cli(overrides, "predict", *EVEREST_OPTIONS, "--nationality", "USA", "--json")
    document = json.loads(first.stdout)  # all of stdout is the one document
    expected = predict_attempt(load_settings(overrides=overrides), EVEREST)
    assert document["probability"] == pytest.approx(expected.probability, abs=1e-12)
    assert document["top_tokens"] == [t.strip() for t in expected.top_tokens.split(";")]
    assert document["attempt"] == {**EVEREST, "push_date": "2019-05-20", "season": "Spring"}
    assert document["model_version"] == "1" and document["weather_used"] is True

    second = cli(
        overrides,
        *("predict", *EVEREST_OPTIONS, "--nationality", "USA", "--json"),
        python=("-X", "importtime"),
    )
    assert json.loads(second.stdout) == document
    imported = imported_modules(second.stderr)
    assert "torch" in imported  # the network runs in the process
    # The registry's versions serve a blend (tests/training_fixtures.py): its tree's library
    # runs in the process too, and imports pandas; a transformer alone needs neither (below).
    assert "catboost" in imported or "lightgbm" in imported
    unused = ("mlflow", "prefect")
    assert not [name for name in imported if name.split(".")[0] in unused]


def test_a_version_of_the_transformer_alone_is_scored_without_the_tree_libraries() -> None:
    """pandas and the tree libraries are no part of a transformer's answer, and cost `predict`
    a quarter of a second (pandas) to a second (LightGBM) of its start: loading and scoring
    import them only for a blend (deepsummit/contracts/trees.py)."""
    probe = (
        "import sys, deepsummit.contracts.artifact, deepsummit.serve.scoring; "
        "print(sorted(m for m in ('catboost', 'lightgbm', 'pandas', 'sklearn') "
        "if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.fixture
def with_scorer(overrides: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The overrides of a user whose `deepsummit up` started the scorer, and that scorer, started
    as `up` starts it."""
    scoring = deep_merge(overrides, {"services": {"scorer": True, "scorer_port": free_port()}})
    with running_scorer(scoring):
        yield scoring


def test_a_running_scorer_answers_predict_and_the_command_imports_no_torch(
    overrides: dict[str, Any], with_scorer: dict[str, Any]
) -> None:
    settings = load_settings(overrides=with_scorer)
    scorer_log = services.log_file(settings, services.SCORER)
    wait_champion_loaded(settings)  # before anyone asked
    asked = cli(
        with_scorer,
        *("predict", *EVEREST_OPTIONS, "--nationality", "USA", "--json"),
        python=("-X", "importtime"),
    )
    assert scorer_log.read_text().count('"POST /predict HTTP/1.1" 200') == 1
    document = json.loads(asked.stdout)
    expected = predict_attempt(load_settings(overrides=overrides), EVEREST)
    assert document["probability"] == pytest.approx(expected.probability, abs=1e-12)
    assert document["by_member"] == pytest.approx(expected.by_member, abs=1e-12)
    assert document["top_tokens"] == [t.strip() for t in expected.top_tokens.split(";")]
    assert document["least_sure"] == expected.least_sure
    assert document["attempt"] == {**EVEREST, "push_date": "2019-05-20", "season": "Spring"}
    assert document["model_version"] == "1" and document["weather_used"] is True
    heavy = ("torch", "polars", "duckdb", "numpy", "mlflow")
    assert not [name for name in imported_modules(asked.stderr) if name.split(".")[0] in heavy]

    # Bad input: the scorer's line, with the command's own exit code.
    refused = cli(
        with_scorer,
        *("predict", *EVEREST_OPTIONS, "--nationality", "Atlantis"),
        exit_code=ExitCode.BAD_INPUT,
    )
    assert (
        refused.stderr.strip()
        .splitlines()[-1]
        .startswith("error: unknown nationality 'Atlantis': no member of the records")
    )
    assert '"POST /predict HTTP/1.1" 422' in scorer_log.read_text()

    # Other settings than the scorer's: it declines, and the command answers itself.
    polled_less = with_scorer["services"]["worker_query_s"] + 1.0
    other = deep_merge(with_scorer, {"services": {"worker_query_s": polled_less}})
    itself = cli(other, "predict", *EVEREST_OPTIONS, "--nationality", "USA", "--json")
    assert '"POST /predict HTTP/1.1" 409' in scorer_log.read_text()
    assert json.loads(itself.stdout) == document


def test_the_scorer_refuses_a_request_naming_another_host_or_not_json(
    with_scorer: dict[str, Any],
) -> None:
    """What a web page could send to 127.0.0.1 (a DNS-rebinding site, a form) gets no answer."""
    url = load_settings(overrides=with_scorer).services.scorer_url
    rebound = urllib.request.Request(f"{url}/health", headers={"Host": "evil.example:80"})
    form = urllib.request.Request(
        f"{url}/predict", data=b'{"planned": {}}', headers={"Content-Type": "text/plain"}
    )
    for request, status in ((rebound, 403), (form, 415)):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=STARTUP_TIMEOUT_S)
        assert refused.value.code == status


IN_PROCESS = """
import sys
from typer.testing import CliRunner
from deepsummit.cli.app import app
result = CliRunner().invoke(app, sys.argv[1:])
print("returned", result.exit_code)
print(result.output)
"""


def test_predict_called_in_process_returns(overrides) -> None:
    """As a script runs it, predict ends its process without the interpreter's teardown; called
    in-process (a test's runner), it returns with its output. Asked in a process of its own: a
    pytest ended by it would stop short and still exit 0."""
    result = cli(
        overrides,
        *("predict", *EVEREST_OPTIONS, "--nationality", "USA"),
        program=("-c", IN_PROCESS),
    )
    assert result.stdout.startswith("returned 0\nP(summit) = "), result.stdout[-2000:]


def test_outlook_json_is_the_replay_report(overrides) -> None:
    result = cli(
        overrides,
        *("outlook", "--peak", "EVER", "--as-of", "2019-05-10", "--days", "3"),
        *("--weather-source", "archive", "--team", str(TEAM_FILE), "--json"),
    )
    document = json.loads(result.stdout)
    (peak,) = document["peaks"]
    assert [day["day"] for day in peak["days"]] == ["2019-05-10", "2019-05-11", "2019-05-12"]
    assert [m["name"] for m in peak["days"][0]["members"]][:2] == ["Leader", "Climber 1"]
    assert len(peak["days"][0]["members"]) == len(document["members"]) == 12
    day = peak["days"][0]
    assert day["expected_summiters"] == pytest.approx(sum(m["probability"] for m in day["members"]))
    assert document["drift_note"] is None
    assert "(Spring weeks " in document["drift"]["reference"]


def test_version_names_the_champion(overrides, tracking_server: str) -> None:
    result = cli(overrides, "--version")
    assert result.stdout.splitlines() == [
        "deepsummit 0.1.0",
        f"champion: v1 (deepsummit@champion at {tracking_server})",
    ]
