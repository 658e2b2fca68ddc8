"""End to end, as a user runs it: `deepsummit up`, `prefect deployment run summit/train` through
the real Prefect server and worker, the MLflow registry, the asset events, the artifacts, the
lineage and the model as the Prefect and MLflow UIs render them in headless Chromium, the
training as a child flow run of the training deployment (summit-train/local), the
schedule, queueing of concurrent runs and the cache on the queued one, and `deepsummit down`
leaving no process behind. Services run on free ports with every file under a temporary folder."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e.browser import launch_browser
from e2e.stack import RUN_DEPLOYMENT_TASK, Stack, TimedCommand
from e2e.ui_checks import (
    check_mlflow_model,
    check_mlflow_run,
    check_prefect_flow_run,
    check_run_artifacts,
)
from mlflow import MlflowClient
from openmeteo_server import OpenMeteoServer
from services_fixtures import exited

from deepsummit.cli.exit_codes import ExitCode
from deepsummit.core.config import load_settings
from deepsummit.core.sections import PROJECT_ROOT
from deepsummit.flows.resources import RESOURCES
from deepsummit.flows.runner import progress_key
from deepsummit.flows.stage_resource import source_asset
from deepsummit.flows.stages import CHAIN, OUTLOOK_CHAIN, TRAIN, task_edges
from deepsummit.flows.summit import (
    DRIFT_ARTIFACT,
    LINEAGE_ARTIFACT,
    OUTLOOK_ARTIFACT,
    SUMMARY_ARTIFACT,
)
from deepsummit.serve.outlook import OUTLOOK_CHART_ALT
from deepsummit.services import supervisor as services
from deepsummit.services.local import prefect_ui_url

pytestmark = [pytest.mark.e2e, pytest.mark.long, pytest.mark.timeout(900)]


def _session_processes(root: Path) -> list[int]:
    """PIDs of processes whose environment points at this session's folder."""
    marker = str(root).encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if marker in (proc / "environ").read_bytes() and not exited(int(proc.name)):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    stack = Stack(tmp_path_factory.mktemp("e2e"), {"services": {"scorer": True}})
    started = time.monotonic()
    try:
        stack.up()
        print(f"\n`deepsummit up`: {time.monotonic() - started:.1f} s")
        yield stack
    finally:
        stack.cli("down")


# `deepsummit main-job` is never silent longer than this while its run goes on.
MAX_SILENCE_S = 60


@pytest.fixture(scope="module")
def main_job(stack: Stack) -> Iterator[TimedCommand]:
    """`deepsummit main-job` (what `make train` runs) on the tiny profile, its lines timed."""
    job = stack.start_cli("main-job", "--param", "profile=tiny", "--timeout-s", "840")
    yield job
    if job.process.poll() is None:
        job.process.kill()
        job.wait(timeout_s=30)


@pytest.fixture(scope="module")
def runs(stack: Stack, main_job: TimedCommand) -> tuple[str, str]:
    """Two runs of summit/train, as when someone starts one while the nightly run trains: the
    main job's, and another triggered once the first runs, which the deployment queues behind
    it and which goes on while the tests read the first."""
    started = time.monotonic()
    first = main_job.wait_for_line(r"/runs/flow-run/([0-9a-f-]{36})$", 300)[1]
    main_job.wait_for_line(r"^  summit/train: running", 600)
    queued = stack.trigger("profile=tiny", watch=False)
    code = main_job.wait(timeout_s=800)
    print(f"\nfirst summit/train run (main-job): {time.monotonic() - started:.1f} s")
    print("\n".join(f"{at - main_job.started:7.1f} s  {line}" for at, line in main_job.lines))
    assert code == 0, main_job.text
    return first, queued


@pytest.fixture(scope="module")
def first_run(runs: tuple[str, str]) -> str:
    return runs[0]


def test_the_main_job_prints_every_stage_and_is_never_silent_for_long(
    stack: Stack, main_job: TimedCommand, first_run: str, training_run: dict[str, Any]
) -> None:
    """What a person sees from `make train`: a line per stage as it ends, with what it made
    and its seconds; the training's progress (which training of three, the epoch, the time
    left) from its child flow run; the links at the end; no raw Prefect events; and never
    more than MAX_SILENCE_S without a line."""
    text = main_job.text
    lines = [line for _, line in main_job.lines]
    for stage in CHAIN:
        assert any(re.match(rf"{stage.name} +(\d+ min )?\d+ s( |$)", line) for line in lines), text
    assert re.search(r"^ingest .* rows ingested, [\d,]+ quarantined", text, re.MULTILINE), text
    trained = r"^train .* model deepsummit v\d+ \(champion, [^)]+\), test AUC 0\.\d{3}"
    assert re.search(trained, text, re.MULTILINE), text
    assert f"  train flow run {training_run['name']}: running on worker" in text
    progress = [line for line in lines if line.startswith("  train: training ")]
    assert progress, text
    shape = r"training [123] of 3 \(.+\), (seed \d+ .*epoch \d+ of \d+|done).*; \d+%"
    assert all(re.search(shape, line) for line in progress), progress
    ui = prefect_ui_url(stack.settings)
    assert f"Prefect flow run   {ui}/runs/flow-run/{first_run}" in text
    for link in ("MLflow model", "MLflow run", "Data Docs", "run folder", "Prefect login"):
        assert re.search(rf"^{link} +\S", text, re.MULTILINE), text
    assert "Asset" not in text and "concurrency limit" not in text.lower()  # Prefect's events
    longest = max(main_job.gaps())
    print(f"\nmain-job: {len(lines)} lines, the longest silence {longest:.1f} s")
    assert longest <= MAX_SILENCE_S, text


def test_up_is_idempotent(stack: Stack) -> None:
    before = {s.name: s.pid for s in services.status(stack.settings)}
    output = stack.cli("up")
    assert output.count("already running") == 4, output
    assert {s.name: s.pid for s in services.status(stack.settings)} == before
    assert all(s.healthy for s in services.status(stack.settings))


def test_deployment_is_scheduled_nightly_and_runs_one_at_a_time(stack: Stack) -> None:
    deployment = stack.get("/deployments/name/summit/train")
    (schedule,) = deployment["schedules"]
    assert schedule["active"]
    assert schedule["schedule"]["cron"] == "0 2 * * *"
    assert schedule["schedule"]["timezone"] == "Asia/Kathmandu"
    assert deployment["global_concurrency_limit"]["limit"] == 1
    assert deployment["concurrency_options"]["collision_strategy"] == "ENQUEUE"
    assert deployment["work_pool_name"] == stack.settings.services.work_pool


@pytest.fixture(scope="module")
def training_run(stack: Stack, first_run: str) -> dict[str, Any]:
    return stack.training_run(first_run)


def test_the_run_completes_with_a_champion_in_the_registry(
    stack: Stack, first_run: str, training_run: dict[str, Any]
) -> None:
    assert stack.get(f"/flow_runs/{first_run}")["state_type"] == "COMPLETED"
    client = MlflowClient(tracking_uri=stack.settings.mlflow.tracking_uri)
    champion = client.get_model_version_by_alias("deepsummit", "champion")
    assert champion.tags["champion_decision"] == "promoted"
    run = client.get_run(champion.run_id)
    assert run.data.tags["prefect.flow_run_id"] == training_run["id"]


def test_the_chain_trains_in_a_child_flow_run_of_the_training_deployment(
    stack: Stack, first_run: str, training_run: dict[str, Any]
) -> None:
    """The chain started a flow run of summit-train/local on the local worker, as a child (its
    parent task run is the chain's), fed the snapshot by URI; the lineage links that run."""
    deployment = stack.get(f"/deployments/name/{stack.settings.train.deployment}")
    assert deployment["work_pool_name"] == stack.settings.services.work_pool
    assert training_run["deployment_id"] == deployment["id"]
    assert training_run["state_type"] == "COMPLETED"
    assert training_run["parameters"]["snapshot_uri"].startswith("runs:/")
    assert set(stack.task_states(training_run["id"])) == {TRAIN.name, "model_version"}
    assert set(stack.task_states(first_run)) == set(CHAIN_TASKS)
    parent = stack.get(f"/task_runs/{training_run['parent_task_run_id']}")
    assert parent["flow_run_id"] == first_run
    assert parent["task_key"].endswith(f"{RUN_DEPLOYMENT_TASK}.summit-train-local")
    artifacts = stack.post(
        "/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [first_run]}}}
    )
    (lineage,) = [a["data"] for a in artifacts if a["key"] == LINEAGE_ARTIFACT]
    assert f"flow run {training_run['name']}" in lineage
    assert f"/runs/flow-run/{training_run['id']}" in lineage


def test_every_stage_emitted_its_asset_events_with_upstream_assets(
    stack: Stack, first_run: str, training_run: dict[str, Any]
) -> None:
    settings = stack.settings
    upstream = stack.materialized(first_run, training_run["id"])
    members, weather, features, snapshot = (
        RESOURCES[name].assets(settings)[0].key
        for name in ("members", "weather_daily", "features", "features_snapshot")
    )
    (model,) = [key for key in upstream if key.startswith("mlflow://")]
    assert model.startswith(
        f"mlflow://127.0.0.1:{settings.services.mlflow_port}/models/deepsummit/"
    )
    members_file = source_asset(settings.data_location(settings.sources.members)).key
    assert members_file in upstream[members]
    assert members in upstream[weather]
    assert {members, weather} <= upstream[features]
    # The training flow run reads the snapshot the chain built beside the features table.
    assert {members, weather} <= upstream[snapshot]
    assert snapshot in upstream[model]


def test_lineage_and_summary_artifacts_belong_to_the_run(stack: Stack, first_run: str) -> None:
    artifacts = stack.post(
        "/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [first_run]}}}
    )
    by_key = {a["key"]: a["data"] for a in artifacts}
    assert "weather_daily" in by_key[LINEAGE_ARTIFACT]
    assert "mlflow://" in by_key[LINEAGE_ARTIFACT]
    assert "Decision" in by_key[SUMMARY_ARTIFACT]


# The chain's own tasks: its stages but training; the training run's: train and model_version.
CHAIN_WITHOUT_TRAINING = tuple(stage for stage in CHAIN if stage is not TRAIN)
CHAIN_TASKS = tuple(stage.name for stage in CHAIN_WITHOUT_TRAINING)
DIGEST = re.compile(r"\b[0-9a-f]{16}\b")  # the lineage table shows 16-hex digest prefixes


def test_lineage_and_model_are_readable_in_the_uis(
    stack: Stack, first_run: str, training_run: dict[str, Any], tmp_path: Path
) -> None:
    """What a person sees in the browser: the run's stages, each asset's materialisation with
    its upstream assets, the lineage artifact with digests and MLflow links, the training run's
    progress; the champion version on the registered model page and the run's metrics and
    plots."""
    mlflow_url = stack.settings.mlflow.tracking_uri
    upstream = stack.materialized(first_run, training_run["id"])
    model_keys = {key for key in upstream if key.startswith("mlflow://")}
    chain_assets = {key: keys for key, keys in upstream.items() if key not in model_keys}
    lineage = stack.post("/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [first_run]}}})
    (lineage_markdown,) = [a["data"] for a in lineage if a["key"] == LINEAGE_ARTIFACT]
    champion = MlflowClient(tracking_uri=mlflow_url).get_model_version_by_alias(
        "deepsummit", "champion"
    )
    train = load_settings("tiny").train  # the profile `first_run` names
    epochs = 3 * train.seeds * train.max_epochs  # member check, newest, refit: every epoch
    with launch_browser(tmp_path / "screenshots") as browser:
        events = check_prefect_flow_run(
            browser,
            stack.prefect,
            first_run,
            expected_stages=CHAIN_TASKS,
            expected_assets=chain_assets,
            expected_edges=task_edges(CHAIN_WITHOUT_TRAINING),
            expected_artifacts={
                LINEAGE_ARTIFACT: sorted(set(DIGEST.findall(lineage_markdown))),
                DRIFT_ARTIFACT: ["Input drift"],
            },
            expected_links={LINEAGE_ARTIFACT: [mlflow_url, stack.prefect.ui_url]},
        )
        assert set(events) == set(chain_assets)  # a card, with rows and digest, for every asset
        check_run_artifacts(
            browser,
            stack.prefect,
            training_run["id"],
            {
                progress_key("train"): [
                    f"train: {epochs} of {epochs} (training 3 of 3 (refit on every season)"
                ]
            },
        )
        run_id = check_mlflow_model(browser, mlflow_url, "deepsummit", champion.version)
        assert run_id == champion.run_id
        shown = check_mlflow_run(
            browser,
            mlflow_url,
            run_id,
            metrics=("transformer_test_auc", "lightgbm_test_auc", "logreg_test_auc"),
            plots=("plots/roc.png", "plots/calibration.png"),
        )
    print(f"\nscreenshots: {tmp_path / 'screenshots'}")
    assert all(0.0 <= value <= 1.0 for value in shown.values())


def test_a_run_queued_behind_the_first_waits_then_reuses_the_cache(
    stack: Stack, runs: tuple[str, str]
) -> None:
    first, queued = (stack.wait_finished(run_id) for run_id in runs)
    assert queued["state_type"] == "COMPLETED"
    assert first["end_time"] <= queued["start_time"]  # ENQUEUE: it waited, not overlapped
    # Nothing changed since the first run, which compared the newest season with the champion it
    # made: every stage of the queued run is served from the cache, training in its own flow run
    # too (the chain's task standing for that run completes when it does).
    states = stack.task_states(queued["id"])
    assert set(states) == set(CHAIN_TASKS)
    assert {name for name, state in states.items() if state != "Cached"} == set(), states
    training = stack.task_states(stack.training_run(queued["id"])["id"])
    assert training == {TRAIN.name: "Cached", "model_version": "Cached"}


def test_a_stage_command_runs_as_a_flow_on_the_local_server(stack: Stack, first_run: str) -> None:
    output = stack.cli("weather")
    assert "weather source: archive" in output
    runs = stack.post("/flow_runs/filter", {"flows": {"name": {"any_": ["weather"]}}})
    assert [run["state_type"] for run in runs] == ["COMPLETED"]


def test_predict_scores_a_planned_attempt_with_the_champion(stack: Stack, first_run: str) -> None:
    """Answered by the scorer `up` started, bad input too."""
    scorer_log = services.log_file(stack.settings, services.SCORER)
    output = stack.cli("predict", "--peak", "KANG", "--push-date", "2015-05-10", "--age", "35")
    assert scorer_log.read_text().count('"POST /predict HTTP/1.1" 200') == 1
    match = re.search(r"P\(summit\) = (0\.\d+|1\.0+) \(band [^)]+\) for KANG on 2015-05-10", output)
    assert match, output
    assert "deepsummit@champion" in output
    assert "tokens that weighed most" in output
    result = subprocess.run(
        [sys.executable, "-m", "deepsummit.cli.app", "predict", "--peak", "KANG",
         "--push-date", "2015-05-10", "--age", "300"],
        env=stack.env, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == ExitCode.BAD_INPUT
    assert result.stderr.strip().splitlines()[-1] == "error: age 300: not in 1..100"
    assert '"POST /predict HTTP/1.1" 422' in scorer_log.read_text()


def test_a_stage_command_fails_with_one_line_on_bad_input(stack: Stack, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "deepsummit.cli.app", "ingest",
         "--members", str(tmp_path / "absent.csv")],
        env=stack.env, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == ExitCode.BAD_INPUT
    assert "Traceback" not in result.stdout + result.stderr
    (error,) = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert "absent.csv" in error


def test_the_outlook_is_scheduled_in_the_climbing_seasons_only(stack: Stack) -> None:
    deployment = stack.get("/deployments/name/summit/outlook")
    crons = sorted(s["schedule"]["cron"] for s in deployment["schedules"])
    assert crons == ["30 5 * 4-5 *", "30 5 * 9-10 *"]  # April-May, September-October
    assert {s["schedule"]["timezone"] for s in deployment["schedules"]} == {"Asia/Kathmandu"}
    assert all(s["active"] for s in deployment["schedules"])


@pytest.fixture(scope="module")
def forecast_server() -> Iterator[OpenMeteoServer]:
    with OpenMeteoServer() as server:
        yield server


@pytest.fixture(scope="module")
def outlook_run(stack: Stack, first_run: str, forecast_server: OpenMeteoServer) -> str:
    options = f'options={{"forecast_url": "{forecast_server.forecast_url}", "peak": ["KANG"]}}'
    started = time.monotonic()
    flow_run_id = stack.trigger(options, deployment="summit/outlook")
    print(f"\nsummit/outlook run: {time.monotonic() - started:.1f} s")
    return flow_run_id


def test_the_outlook_deployment_writes_outlooks_from_the_champion_and_the_forecast(
    stack: Stack, outlook_run: str, forecast_server: OpenMeteoServer, tmp_path: Path
) -> None:
    """`prefect deployment run summit/outlook` against the local forecast server: the outlooks
    asset's upstreams are the champion's version and the forecast weather, and the artifact
    shows the table and the chart in the Prefect UI."""
    assert stack.get(f"/flow_runs/{outlook_run}")["state_type"] == "COMPLETED"
    settings = stack.settings
    outlooks, forecast, model, peaks = (
        RESOURCES[name].assets(settings)[0].key
        for name in ("outlooks", "forecast_weather", "champion_model", "peaks")
    )
    api = source_asset(forecast_server.forecast_url).key
    champion = MlflowClient(settings.mlflow.tracking_uri).get_model_version_by_alias(
        "deepsummit", "champion"
    )
    assert model.endswith(f"/models/deepsummit/{champion.version}")
    with launch_browser(tmp_path / "screenshots") as browser:
        events = check_prefect_flow_run(
            browser,
            stack.prefect,
            outlook_run,
            expected_stages=[stage.name for stage in OUTLOOK_CHAIN],
            expected_assets={outlooks: {forecast, model}, forecast: {peaks, api}},
            expected_edges=task_edges(OUTLOOK_CHAIN),
            expected_artifacts={OUTLOOK_ARTIFACT: ["KANG: best push day", "team: expected"]},
            expected_images={OUTLOOK_ARTIFACT: [OUTLOOK_CHART_ALT]},
        )
    assert events[outlooks]["payload"]["model_version"] == str(champion.version)
    assert events[outlooks]["payload"]["written"] == 16 * (12 + 1)


def test_the_outlook_command_prints_each_member_and_the_team(
    stack: Stack, first_run: str, forecast_server: OpenMeteoServer
) -> None:
    url = forecast_server.forecast_url
    output = stack.cli(
        "outlook", "--peak", "KANG", "--days", "5", "--age", "35", "--sex", "F",
        "--agency", "Nobody Ever Treks", "--forecast-url", url,
    )  # fmt: skip
    assert re.search(r"^  push day( +\d\d-\d\d\*?){5}$", output, re.MULTILINE), output
    assert re.search(r"^  member( +[01]\.\d\d){5}$", output, re.MULTILINE), output
    assert re.search(r"^  team: expected( +[01]\.\d\d){5}$", output, re.MULTILINE), output
    assert "best push day" in output and "forecast@" in output
    assert "agency 'Nobody Ever Treks'" in output
    result = subprocess.run(
        [sys.executable, "-m", "deepsummit.cli.app", "outlook", "--peak", "KANG",
         "--from", "2099-05-10", "--forecast-url", url],
        env=stack.env, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == ExitCode.BAD_INPUT
    last = result.stderr.strip().splitlines()[-1]
    assert re.fullmatch(r"error: KANG: push day 2099-05-25 is beyond the forecast horizon .*", last)


def test_down_leaves_no_process_behind(stack: Stack, first_run: str) -> None:
    pids = [s.pid for s in services.status(stack.settings) if s.running]
    assert len(pids) == 4
    assert _session_processes(stack.root)
    output = stack.cli("down")
    assert output.count(": stopped") == 4, output
    time.sleep(1)
    assert not _session_processes(stack.root)
    assert all(exited(pid) for pid in pids)
    assert "stopped" in stack.cli("status", exit_code=3)  # a health check: services down
