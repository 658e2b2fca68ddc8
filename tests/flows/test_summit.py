"""The flows under Prefect's test harness, on a two-peak slice with the tiny profile: the chain
runs, every stage materialises its assets with metadata and lineage, each stage waits for the
stages that write its inputs (the run graph's edges), the artifacts are there, an unchanged rerun
reuses every stage and a changed input is recomputed; the weather stage retries rejected
responses under Prefect and stops without a retry at the daily quota."""

from __future__ import annotations

import copy
import gzip
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import torch
from flows_fixtures import isolated_paths, migrated_prefect_harness, write_bundle_slice
from mlflow import MlflowClient
from openmeteo_server import OpenMeteoServer
from prefect import flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import WorkPoolCreate
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterFlowRunId,
    FlowRunFilter,
    FlowRunFilterId,
    LogFilter,
    LogFilterFlowRunId,
)
from prefect.events.filters import EventFilter, EventNameFilter, EventRelatedFilter
from prefect.states import Failed
from weather_fixtures import load_mini_tables

from deepsummit.core.config import Settings, deep_merge, load_settings
from deepsummit.core.errors import PipelineError, QuotaExhausted
from deepsummit.core.warehouse import connect
from deepsummit.flows.cache_keys import cache_inputs
from deepsummit.flows.resources import RESOURCES
from deepsummit.flows.runner import _retry_options, progress_key
from deepsummit.flows.stage_resource import source_asset
from deepsummit.flows.stages import CHAIN, STAGES, WEATHER, Retry, task_edges
from deepsummit.flows.summit import (
    DRIFT_ARTIFACT,
    LINEAGE_ARTIFACT,
    OUTLOOK_ARTIFACT,
    STAGE_FLOWS,
    SUMMARY_ARTIFACT,
    outlook,
    stage_flow,
    summit,
)
from deepsummit.flows.training import training_deployment

pytestmark = pytest.mark.long

STAGES_RUN = ("ingest", "weather", "features", "train", "model_version", "drift")


# Module scope: torn down right after these tests (at the end of a whole session, the harness's
# log/event drain can hang on state other test modules left behind).
@pytest.fixture(scope="module")
def harness() -> Iterator[None]:
    with migrated_prefect_harness():
        yield


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Settings]:
    root = tmp_path_factory.mktemp("flows")
    overrides = isolated_paths(root)
    overrides["paths"]["data_dir"] = str(write_bundle_slice(root / "data"))
    overrides["mlflow"] = {"tracking_uri": f"sqlite:///{root / 'mlflow.db'}"}
    return overrides, load_settings("tiny", overrides)


def promote_a_copy_of_the_champion(settings: Settings) -> str:
    """A new version of the champion's files, made champion by hand (as a person may): the same
    model, a new version number."""
    client = MlflowClient(settings.mlflow.tracking_uri)
    name = settings.mlflow.registered_model
    champion = client.get_model_version_by_alias(name, "champion")
    copy = client.create_model_version(name, champion.source, champion.run_id, champion.tags)
    client.set_registered_model_alias(name, "champion", copy.version)
    return str(copy.version)


@pytest.fixture(scope="module")
def runs(harness: None, workspace) -> list[Any]:
    """The final states of three summit runs with the same inputs: the first registers the
    first champion; before the second, another version becomes champion; the third changes
    nothing."""
    overrides, settings = workspace
    first = summit(profile="tiny", overrides=overrides, return_state=True)
    promote_a_copy_of_the_champion(settings)
    return [first, *(summit(profile="tiny", overrides=overrides, return_state=True) for _ in "23")]


def _task_runs(flow_run_id: Any) -> dict[str, Any]:
    """Task name → its task run in the flow run."""
    with get_client(sync_client=True) as client:
        task_runs = client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
        )
    return {run.name.rsplit("-", 1)[0]: run for run in task_runs}


def _task_states_by_name(flow_run_id: Any) -> dict[str, str]:
    return {name: run.state.name for name, run in _task_runs(flow_run_id).items()}


def key(settings: Settings, resource: str) -> str:
    (asset,) = RESOURCES[resource].assets(settings)
    return asset.key


def _materialisations(flow_run_id: Any, expected: int) -> dict[str, Any]:
    """Asset key → materialisation event of the run (the server persists events in batches)."""
    event_filter = EventFilter(
        event=EventNameFilter(name=["prefect.asset.materialization.succeeded"]),
        related=EventRelatedFilter(id=[f"prefect.flow-run.{flow_run_id}"]),
    )
    for _ in range(30):
        with get_client(sync_client=True) as client:
            events = {e.resource.id: e for e in client.read_events(event_filter, 50).events}
        if len(events) >= expected:
            break
        time.sleep(2)
    return events


def test_the_chain_completes_and_registers_a_champion(runs, workspace) -> None:
    first, *_ = runs
    _, settings = workspace
    assert first.is_completed(), first.message
    summary = first.result()
    client = MlflowClient(tracking_uri=settings.mlflow.tracking_uri)
    version = client.get_model_version(settings.mlflow.registered_model, summary["model_version"])
    assert version.tags["champion_decision"] == "promoted"  # (another is champion by now)
    assert summary["champion"] is True
    assert Path(summary["run_dir"], "summary.json").exists()
    assert Path(summary["data_docs"]).exists()


def test_every_stage_materialises_its_assets_with_lineage(runs, workspace) -> None:
    first, *_ = runs
    _, settings = workspace
    events = _materialisations(first.state_details.flow_run_id, expected=9)
    members, weather = key(settings, "members"), key(settings, "weather_daily")
    features, snapshot = key(settings, "features"), key(settings, "features_snapshot")
    model = next(k for k in events if k.startswith("mlflow://"))
    assert model.endswith(f"/models/deepsummit/{first.result()['model_version']}")
    assert {members, weather, features, snapshot} <= set(events)

    def upstream(asset_key: str) -> set[str]:
        return {r.id for r in events[asset_key].related if r.role == "asset"}

    members_file = source_asset(settings.data_location(settings.sources.members)).key
    assert members_file in upstream(members)
    assert {members, key(settings, "weather_source")} <= upstream(weather)
    assert {members, weather} <= upstream(features)
    assert {snapshot, features} <= upstream(model)  # the snapshot, and (through the features
    # task it waits for) the table it was written from
    # Metadata of each materialisation: rows and a content digest.
    assert events[members].payload["rows"] > 2000
    assert len(events[weather].payload["digest"]) == 64
    assert events[model].payload["version"] == first.result()["model_version"]


def test_each_stage_waits_for_the_stages_that_write_its_inputs(runs) -> None:
    """The run graph's edges: a task run's `wait_for` inputs are its upstream task runs."""
    first, *_ = runs
    task_runs = _task_runs(first.state_details.flow_run_id)
    ids = {name: str(run.id) for name, run in task_runs.items()}

    def parents(name: str) -> set[str]:
        inputs = task_runs[name].task_inputs.get("wait_for", [])
        return {name for name, id_ in ids.items() if id_ in {str(i.id) for i in inputs}}

    assert parents("ingest") == set()
    assert parents("weather") == {"ingest"}
    assert parents("features") == {"ingest", "weather"}
    assert parents("train") == {"features"}
    assert parents("model_version") == {"train"}
    assert parents("drift") == {"features", "model_version"}
    assert {(p, n) for n in task_runs for p in parents(n)} == task_edges()  # as declared


def test_lineage_and_summary_artifacts_are_published(runs, workspace) -> None:
    first, *_ = runs
    _, settings = workspace
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(
                flow_run_id=ArtifactFilterFlowRunId(any_=[first.state_details.flow_run_id])
            )
        )
    by_key = {a.key: a.data for a in artifacts}
    lineage = by_key[LINEAGE_ARTIFACT]
    for resource in ("members", "weather_daily", "features", "features_snapshot"):
        assert f"`{key(settings, resource)}`" in lineage
    assert f"/models/deepsummit/{first.result()['model_version']}" in lineage
    summary = by_key[SUMMARY_ARTIFACT]
    assert "champion" in summary and "logistic" in summary.lower()


def test_training_reports_its_progress_as_a_prefect_artifact(runs) -> None:
    first, *_ = runs
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(
                flow_run_id=ArtifactFilterFlowRunId(any_=[first.state_details.flow_run_id])
            )
        )
    (progress,) = [a for a in artifacts if a.key == progress_key("train")]
    assert progress.type == "progress"
    # tiny: 2 seeds of 2 epochs planned in the member check, the training before the test split,
    # then the refit on every season (the refits train the epochs the check kept, maybe fewer)
    assert float(progress.data) == 100.0
    assert progress.description == (
        "train: 12 of 12 (training 3 of 3 (refit on every season), done)"
    )


def _artifacts(flow_run_id: Any) -> dict[str, Any]:
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
    return {a.key: a for a in artifacts}


def test_the_outlook_materialises_from_the_champion_and_the_forecast(
    runs, workspace, tmp_path: Path
) -> None:
    """summit/outlook's flow: forecast, then outlook; the outlooks asset's upstreams are the
    champion's model version and the forecast weather, and its artifact has the chart."""
    overrides, settings = workspace
    changed = copy.deepcopy(overrides)
    with OpenMeteoServer() as server:
        changed["forecast"] = {"api_url": server.forecast_url, "cache_path": str(tmp_path)}
        changed["outlook"] = {"peaks": ["ANN1", "KANG"], "days": 4}
        state = outlook(profile="tiny", overrides=changed, return_state=True)
        assert server.requests == 2

    assert state.is_completed(), state.message
    report = state.result()
    flow_run_id = state.state_details.flow_run_id
    assert [p.peakid for p in report.peaks] == ["ANN1", "KANG"]
    champion = MlflowClient(settings.mlflow.tracking_uri).get_model_version_by_alias(
        "deepsummit", "champion"
    )
    assert report.model_version == str(champion.version)
    events = _materialisations(flow_run_id, expected=2)
    outlooks, forecast = key(settings, "outlooks"), key(settings, "forecast_weather")
    model = key(settings, "champion_model")
    assert model.endswith(f"/models/deepsummit/{report.model_version}")
    upstream = {r.id for r in events[outlooks].related if r.role == "asset"}
    assert upstream == {forecast, model}
    assert events[outlooks].payload["model_version"] == report.model_version
    assert events[outlooks].payload["written"] == 2 * 4 * (12 + 1)
    assert set(events[forecast].payload["sources"]) == {"ANN1", "KANG"}
    states = _task_states_by_name(flow_run_id)
    assert states == {"forecast": "Completed", "outlook": "Completed"}
    task_runs = _task_runs(flow_run_id)
    waits = {str(i.id) for i in task_runs["outlook"].task_inputs.get("wait_for", [])}
    assert waits == {str(task_runs["forecast"].id)}
    published = _artifacts(flow_run_id)
    assert "data:image/png;base64," in published[OUTLOOK_ARTIFACT].data
    assert "best push day" in published[OUTLOOK_ARTIFACT].data
    assert f"`{outlooks}`" in published[LINEAGE_ARTIFACT].data


def test_an_unchanged_rerun_reuses_every_stage(runs) -> None:
    first, _, third = runs
    assert third.is_completed(), third.message
    assert set(_task_states_by_name(first.state_details.flow_run_id).values()) == {"Completed"}
    reused = _task_states_by_name(third.state_details.flow_run_id)
    assert set(reused) == set(STAGES_RUN)
    assert set(reused.values()) == {"Cached"}
    assert third.result()["model_version"] == first.result()["model_version"]


def test_a_new_champion_renews_the_drift_report_and_nothing_else(runs, workspace) -> None:
    """The first run compares the newest season with the champion it made; another version
    became champion before the second run, which renews the drift report (the drift stage
    reads the champion) while every other stage stays cached."""
    first, second, _ = runs
    _, settings = workspace
    states = _task_states_by_name(second.state_details.flow_run_id)
    assert states == {**dict.fromkeys(STAGES_RUN, "Cached"), "drift": "Completed"}
    drift = {
        run.state_details.flow_run_id: _artifacts(run.state_details.flow_run_id)[DRIFT_ARTIFACT]
        for run in (first, second)
    }
    version = int(first.result()["model_version"])
    assert f"champion v{version}" in drift[first.state_details.flow_run_id].data
    assert f"champion v{version + 1}" in drift[second.state_details.flow_run_id].data
    reports = sorted(p.name for p in (settings.paths.var_dir / "drift").glob("*.json"))
    assert [name.rsplit("-", 1)[1] for name in reports] == [
        f"v{version}.json",
        f"v{version + 1}.json",
    ]


def test_a_changed_input_table_invalidates_the_stage_that_reads_it(runs, workspace) -> None:
    """One history weather value changes in the warehouse: the features stage, which declares
    weather_daily among its reads, recomputes; run again unchanged, it is served cached. A
    forecast stored in the same table (the outlook's) is not the features' input."""
    overrides, settings = workspace
    features = STAGE_FLOWS["features"]
    features(profile="tiny", overrides=overrides)
    with connect(settings.paths.warehouse) as con:
        con.execute(
            "INSERT OR REPLACE INTO weather_daily SELECT * REPLACE "
            "('forecast@2026-01-01T00:00Z' AS source) FROM weather_daily LIMIT 100"
        )
    forecast_only = features(profile="tiny", overrides=overrides, return_state=True)
    with connect(settings.paths.warehouse) as con:
        con.execute(
            "UPDATE weather_daily SET temperature_2m_mean = temperature_2m_mean + 1 "
            "WHERE source = 'archive' "
            "AND date = (SELECT max(date) FROM weather_daily WHERE source = 'archive')"
        )
    changed = features(profile="tiny", overrides=overrides, return_state=True)
    again = features(profile="tiny", overrides=overrides, return_state=True)
    assert _task_states_by_name(forecast_only.state_details.flow_run_id) == {"features": "Cached"}
    assert _task_states_by_name(changed.state_details.flow_run_id) == {"features": "Completed"}
    assert _task_states_by_name(again.state_details.flow_run_id) == {"features": "Cached"}


def test_a_changed_source_is_not_served_from_the_cache(runs, workspace) -> None:
    overrides, settings = workspace
    members_file = Path(settings.data_location(settings.sources.members))
    members = pl.read_csv(members_file, infer_schema_length=0)
    members_file.write_bytes(gzip.compress(members.head(members.height - 10).write_csv().encode()))
    state = STAGE_FLOWS["ingest"](profile="tiny", overrides=overrides, return_state=True)
    assert state.is_completed()
    assert _task_states_by_name(state.state_details.flow_run_id) == {"ingest": "Completed"}
    assert state.result().rows["members"] <= members.height - 10


def test_a_stage_that_runs_before_its_inputs_exist_says_which_to_run(
    harness: None, tmp_path: Path
) -> None:
    overrides = isolated_paths(tmp_path)
    with pytest.raises(PipelineError) as raised:
        STAGE_FLOWS["features"](profile="tiny", overrides=overrides)
    assert str(raised.value) == (
        "features: its input members does not exist yet; run `deepsummit ingest` first"
    )


def test_weather_retries_never_retry_a_spent_quota() -> None:
    options = _retry_options(WEATHER)
    assert options["retries"] >= 2
    delays = options["retry_delay_seconds"](options["retries"])
    assert delays == sorted(delays) and delays[-1] > delays[0]  # exponential backoff
    retry = options["retry_condition_fn"]
    assert retry(None, None, Failed(data=OSError("connection refused"))) is True
    assert retry(None, None, Failed(data=QuotaExhausted("daily limit"))) is False


def test_cache_inputs_follow_each_stage_s_own_declared_inputs(runs, workspace) -> None:
    """(`runs`: the keys of the stages after features read the snapshot the chain wrote.)"""
    overrides, settings = workspace
    epochs, split = copy.deepcopy(overrides), copy.deepcopy(overrides)
    epochs["train"]["max_epochs"] = 7
    split["features"]["split"] = {"train_until": 2005}
    more_epochs, other_split = load_settings("tiny", epochs), load_settings("tiny", split)
    by_stage = {stage.name: cache_inputs(stage, settings) for stage in CHAIN}
    assert cache_inputs(STAGES["weather"], more_epochs) == by_stage["weather"]
    assert cache_inputs(STAGES["features"], more_epochs) == by_stage["features"]
    assert cache_inputs(STAGES["train"], more_epochs) != by_stage["train"]
    assert cache_inputs(STAGES["features"], other_split) != by_stage["features"]
    # An operational setting (where the cache lives) changes no stage's key.
    cache_elsewhere = copy.deepcopy(overrides)
    cache_elsewhere["weather"]["cache_path"] = str(Path(overrides["paths"]["var_dir"]) / "c2")
    moved = load_settings("tiny", cache_elsewhere)
    assert cache_inputs(STAGES["weather"], moved) == by_stage["weather"]


def test_a_snapshot_written_again_with_the_same_content_is_the_same_train_input(
    runs, workspace
) -> None:
    """The train stage's key follows the snapshot's content digest, not its files' times."""
    _, settings = workspace
    before = cache_inputs(STAGES["train"], settings)
    snapshot = RESOURCES["features_snapshot"].location(settings)
    for path in snapshot.rglob("*"):
        path.touch()  # as a rebuild that writes the same bytes again
    assert cache_inputs(STAGES["train"], settings) == before
    assert before["reads"]["features_snapshot"].startswith(snapshot.name)


def _open_meteo_workspace(root: Path, server: OpenMeteoServer) -> dict[str, Any]:
    """Overrides for a weather run against `server` on a warehouse of the mini clean tables."""
    overrides = isolated_paths(root)
    overrides["weather"].update(
        source="open-meteo", api_url=server.url, backoff_factor=0.01, backoff_max_s=0.05
    )
    with connect(Path(overrides["paths"]["warehouse"])) as con:
        load_mini_tables(con)
    return overrides


def test_the_weather_stage_retries_rejected_responses_and_stops_at_the_quota(
    harness: None, tmp_path: Path
) -> None:
    """Under Prefect: a response the stage rejects fails the task, whose retry fetches only the
    missing days and completes; a spent daily quota fails it once, with no retry."""
    quick = replace(WEATHER, retry=Retry(retries=2, backoff_s=0.1, never=(QuotaExhausted,)))
    original = STAGES["weather"]
    STAGES["weather"] = quick  # the task body looks its stage up by name
    run_weather = stage_flow(quick)
    try:
        with OpenMeteoServer() as server:
            server.inject("short")  # the first response lacks a day: rejected
            overrides = _open_meteo_workspace(tmp_path / "retry", server)
            state = run_weather(overrides=overrides, return_state=True)
            assert state.is_completed(), state.message
            (task_run,) = _task_runs(state.state_details.flow_run_id).values()
            assert task_run.run_count == 2
            assert state.result().complete

            server.daily_limit = server.weighted_calls  # nothing more today
            overrides = _open_meteo_workspace(tmp_path / "quota", server)
            state = run_weather(overrides=overrides, return_state=True)
            assert state.is_failed()
            (task_run,) = _task_runs(state.state_details.flow_run_id).values()
            assert task_run.run_count == 1
            with pytest.raises(QuotaExhausted):
                state.result()
    finally:
        STAGES["weather"] = original


# ---------------------------------------------------------------- where training runs


def _logged(flow_run_id: Any, text: str, timeout_s: float = 30.0) -> list[str]:
    """The run's log lines holding `text`, read once the flow run's last line (the engine's
    "Finished in state", no task run's) is on the server: the logs arrive in batches, in
    order, so none of the run's lines is still to come, and a run that logged no such line
    says so at once."""
    deadline = time.monotonic() + timeout_s
    while True:
        with get_client(sync_client=True) as client:
            logs = client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
        finished = any(
            log.task_run_id is None and log.message.startswith("Finished in state") for log in logs
        )
        if finished or time.monotonic() > deadline:
            return [log.message for log in logs if text in log.message]
        time.sleep(0.5)


@flow
def _where_training_runs(settings: Settings) -> str | None:
    return training_deployment(settings)


def _decide(settings: Settings) -> tuple[str | None, list[str]]:
    """Where the chain would train, and the line its flow run logged about it."""
    state = _where_training_runs(settings, return_state=True)
    return state.result(), _logged(state.state_details.flow_run_id, "training in this process")


def test_without_the_training_deployment_the_chain_trains_in_its_own_flow_run(runs) -> None:
    """Under the test harness there is no summit-train/local: the chain says so in one line
    and runs the train stage as its own task."""
    first, *_ = runs
    flow_run_id = first.state_details.flow_run_id
    assert _logged(flow_run_id, "training in this process") == [
        "train: no deployment 'summit-train/local' — training in this process"
    ]
    assert _task_states_by_name(flow_run_id)["train"] == "Completed"


def test_training_stays_in_process_until_a_worker_of_its_pool_is_online(
    harness: None, workspace
) -> None:
    """The deployment and its pool exist but no worker polls the pool: one line, in process
    (where the settings allow the CPU); once a worker's heartbeat reaches the server, the chain
    trains on that deployment."""
    overrides, _ = workspace
    settings = load_settings("base", deep_merge(overrides, {"train": {"cpu_fallback": True}}))
    flow_name, name = settings.train.deployment.split("/")
    pool = "gpu"
    with get_client(sync_client=True) as client:
        client.create_work_pool(WorkPoolCreate(name=pool, type="process"))
        flow_id = client.create_flow_from_name(flow_name)
        client.create_deployment(flow_id, name, work_pool_name=pool, entrypoint="training.py:x")
    chosen, lines = _decide(settings)
    assert chosen is None
    assert lines == [f"train: no worker on pool {pool!r} — training in this process"]

    with get_client(sync_client=True) as client:
        client.send_worker_heartbeat(pool, "a-gpu-worker")
    chosen, lines = _decide(settings)
    assert chosen == settings.train.deployment
    assert lines == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device here may train base")
def test_base_without_a_gpu_worker_or_a_gpu_fails_in_one_line_unless_the_cpu_is_allowed(
    harness: None, workspace
) -> None:
    """No worker on the GPU pool and no CUDA device here: the chain refuses to train the spec's
    model on this machine's CPU, in one line naming the setting that would allow it."""
    overrides, _ = workspace
    settings = load_settings(
        "base", deep_merge(overrides, {"train": {"deployment": "summit-train/nowhere"}})
    )
    assert not settings.train.cpu_fallback  # the default: refuse

    state = _where_training_runs(settings, return_state=True)

    assert state.is_failed()
    [line] = state.message.splitlines()
    assert "no deployment" in line and "train.cpu_fallback = true" in line
