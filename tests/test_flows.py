"""The flows under Prefect's test harness, on a two-peak slice with the tiny profile: the chain
runs, every stage materialises its assets with metadata and lineage, the artifacts are there, an
unchanged rerun reuses every stage and a changed input is recomputed."""

from __future__ import annotations

import copy
import gzip
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from flows_fixtures import isolated_paths, write_bundle_slice
from mlflow import MlflowClient
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterFlowRunId,
    FlowRunFilter,
    FlowRunFilterId,
)
from prefect.events.filters import EventFilter, EventNameFilter, EventRelatedFilter
from prefect.states import Failed
from prefect.testing.utilities import prefect_test_harness

from flows import assets, fingerprints, tasks
from flows.summit import LINEAGE_ARTIFACT, SUMMARY_ARTIFACT, ingest_flow, summit
from pipeline.config import Settings, load_settings
from pipeline.errors import QuotaExhausted

STAGES = ("ingest", "weather", "features", "train", "model_version")


# Module scope: torn down right after these tests (at the end of a whole session, the harness's
# log/event drain can hang on state other test modules left behind).
@pytest.fixture(scope="module")
def harness() -> Iterator[None]:
    with prefect_test_harness(server_startup_timeout=90):
        yield


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Settings]:
    root = tmp_path_factory.mktemp("flows")
    overrides = isolated_paths(root)
    overrides["paths"]["data_dir"] = str(write_bundle_slice(root / "data"))
    overrides["mlflow"] = {"tracking_uri": f"sqlite:///{root / 'mlflow.db'}"}
    return overrides, load_settings("tiny", overrides)


@pytest.fixture(scope="module")
def runs(harness: None, workspace) -> list[Any]:
    """The final states of two summit runs with the same inputs."""
    overrides, _ = workspace
    return [summit(profile="tiny", overrides=overrides, return_state=True) for _ in range(2)]


def _task_states_by_name(flow_run_id: Any) -> dict[str, str]:
    with get_client(sync_client=True) as client:
        task_runs = client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
        )
    return {run.name.rsplit("-", 1)[0]: run.state.name for run in task_runs}


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
    first, _ = runs
    _, settings = workspace
    assert first.is_completed(), first.message
    summary = first.result()
    client = MlflowClient(tracking_uri=settings.mlflow.tracking_uri)
    champion = client.get_model_version_by_alias(settings.mlflow.registered_model, "champion")
    assert str(champion.version) == summary["model_version"]
    assert summary["champion"] is True
    assert Path(summary["run_dir"], "summary.json").exists()
    assert Path(summary["data_docs"]).exists()


def test_every_stage_materialises_its_assets_with_lineage(runs, workspace) -> None:
    first, _ = runs
    _, settings = workspace
    events = _materialisations(first.state_details.flow_run_id, expected=8)
    members = assets.table_asset(settings, "members").key
    weather = assets.weather_asset(settings).key
    features = assets.features_table_asset(settings).key
    version = first.result()["model_version"]
    model = assets.model_version_asset(settings, version, None).key
    assert {members, weather, features, model} <= set(events)

    def upstream(key: str) -> set[str]:
        return {r.id for r in events[key].related if r.role == "asset"}

    members_file = assets.source_asset(settings.data_location(settings.sources.members)).key
    assert members_file in upstream(members)
    assert {members, assets.weather_source_asset(settings).key} <= upstream(weather)
    assert {members, weather} <= upstream(features)
    assert features in upstream(model)
    # Metadata of each materialisation: rows and a content digest.
    assert events[members].payload["rows"] > 2000
    assert len(events[weather].payload["digest"]) == 64
    assert events[model].payload["version"] == version


def test_lineage_and_summary_artifacts_are_published(runs, workspace) -> None:
    first, _ = runs
    _, settings = workspace
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(
                flow_run_id=ArtifactFilterFlowRunId(any_=[first.state_details.flow_run_id])
            )
        )
    by_key = {a.key: a.data for a in artifacts}
    lineage = by_key[LINEAGE_ARTIFACT]
    for key in (
        assets.table_asset(settings, "members").key,
        assets.weather_asset(settings).key,
        assets.features_table_asset(settings).key,
    ):
        assert f"`{key}`" in lineage
    assert f"/models/deepsummit/{first.result()['model_version']}" in lineage
    summary = by_key[SUMMARY_ARTIFACT]
    assert "champion" in summary and "logistic" in summary.lower()


def test_an_unchanged_rerun_reuses_every_stage(runs) -> None:
    first, second = runs
    assert second.is_completed(), second.message
    assert set(_task_states_by_name(first.state_details.flow_run_id).values()) == {"Completed"}
    reused = _task_states_by_name(second.state_details.flow_run_id)
    assert set(reused) == set(STAGES)
    assert set(reused.values()) == {"Cached"}
    assert second.result()["model_version"] == first.result()["model_version"]


def test_a_changed_source_is_not_served_from_the_cache(runs, workspace) -> None:
    overrides, settings = workspace
    members_file = Path(settings.data_location(settings.sources.members))
    members = pl.read_csv(members_file, infer_schema_length=0)
    members_file.write_bytes(gzip.compress(members.head(members.height - 10).write_csv().encode()))
    state = ingest_flow(profile="tiny", overrides=overrides, return_state=True)
    assert state.is_completed()
    assert _task_states_by_name(state.state_details.flow_run_id) == {"ingest": "Completed"}
    assert state.result().rows["members"] <= members.height - 10


def test_weather_fetches_are_retried_unless_the_daily_quota_is_spent() -> None:
    options = tasks.weather_options()
    assert options["retries"] >= 2
    delays = options["retry_delay_seconds"](options["retries"])
    assert delays == sorted(delays) and delays[-1] > delays[0]  # exponential backoff
    retry = options["retry_condition_fn"]
    assert retry(None, None, Failed(data=OSError("connection refused"))) is True
    assert retry(None, None, Failed(data=QuotaExhausted("daily limit"))) is False


def test_a_stage_fingerprint_follows_its_own_inputs_only(workspace) -> None:
    overrides, settings = workspace
    epochs, split = copy.deepcopy(overrides), copy.deepcopy(overrides)
    epochs["train"]["max_epochs"] = 7
    split["features"]["split"] = {"train_until": 2005}
    other = load_settings("tiny", epochs)
    assert fingerprints.weather_fingerprint(other) == fingerprints.weather_fingerprint(settings)
    assert fingerprints.train_fingerprint(other, Path(".")) != fingerprints.train_fingerprint(
        settings, Path(".")
    )
    assert fingerprints.features_fingerprint(
        load_settings("tiny", split)
    ) != fingerprints.features_fingerprint(settings)
