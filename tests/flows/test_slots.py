"""Runs that overlap take turns: every stage that writes the warehouse, and every champion gate,
holds a Prefect global concurrency slot, so two of them finish one after the other."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import pandas as pd
import polars as pl
import pytest
from flows_fixtures import isolated_paths, migrated_prefect_harness, write_bundle_slice
from mlflow import MlflowClient
from prefect import flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

from deepsummit.core.context import REGISTRY
from deepsummit.core.inputs import Known
from deepsummit.core.sections import BacktestConfig, MlflowConfig
from deepsummit.core.service_sections import ServicesConfig
from deepsummit.flows.runner import slot
from deepsummit.flows.summit import STAGE_FLOWS
from deepsummit.train import registry
from deepsummit.train.registration import TrainedModel
from deepsummit.train.registry import Candidate, gate


@pytest.fixture(scope="module")
def harness() -> Iterator[None]:
    with migrated_prefect_harness():
        yield


def _concurrently(*calls) -> list[Any]:
    results: list[Any] = [None] * len(calls)

    def run(index: int, call) -> None:
        results[index] = call()

    threads = [threading.Thread(target=run, args=(i, call)) for i, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    return results


def _task_run_span(state, timeout_s: float = 60.0) -> tuple[Any, Any]:
    """The flow run's one task run's start and end, once the server has it: the client sends
    task runs as events, which a busy server may take a while to write."""
    deadline = time.monotonic() + timeout_s
    with get_client(sync_client=True) as client:
        while True:
            runs = client.read_task_runs(
                flow_run_filter=FlowRunFilter(
                    id=FlowRunFilterId(any_=[state.state_details.flow_run_id])
                )
            )
            if (runs and runs[0].end_time is not None) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    (task_run,) = runs
    return task_run.start_time, task_run.end_time


def test_two_writers_of_one_warehouse_finish_one_after_the_other(
    harness: None, tmp_path: Path
) -> None:
    overrides = isolated_paths(tmp_path)
    overrides["paths"]["data_dir"] = str(write_bundle_slice(tmp_path / "data", ("KANG",)))
    ingest = STAGE_FLOWS["ingest"]
    first, second = _concurrently(
        lambda: ingest(profile="tiny", overrides=overrides, return_state=True),
        lambda: ingest(profile="tiny", overrides=overrides, return_state=True),
    )
    assert first.is_completed(), first.message
    assert second.is_completed(), second.message
    # The later one (computed, or served from the cache the earlier one just filled) started
    # after the earlier one ended: it waited for the warehouse slot.
    spans = sorted([_task_run_span(first), _task_run_span(second)])
    assert spans[0][1] <= spans[1][0]


def _versions(tmp_path: Path) -> tuple[MlflowConfig, list[str]]:
    """Two registered versions with runs of their own (the gate reads nothing else of them)."""
    config = MlflowConfig(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    client = MlflowClient(config.tracking_uri)
    experiment = client.create_experiment("gates", artifact_location=(tmp_path / "a").as_uri())
    client.create_registered_model(config.registered_model)
    versions = []
    for _ in range(2):
        run = client.create_run(experiment)
        version = client.create_model_version(
            config.registered_model, f"runs:/{run.info.run_id}/model", run.info.run_id
        )
        versions.append(str(version.version))
    return config, versions


def _candidate(version: str, probability: np.ndarray, labels: np.ndarray) -> Candidate:
    keys = pl.DataFrame(
        {
            "expid": [f"E{i // 4}" for i in range(len(labels))],
            "member_id": [f"M{i}" for i in range(len(labels))],
            "year": [2019] * len(labels),
        }
    )
    predictions = keys.with_columns(label=pl.Series(labels), probability=pl.Series(probability))
    # The same answers on the member check for both: the gate's member groups say nothing.
    members = predictions.with_columns(
        peakid=pl.lit("EVER"), age=40.0, sex=1, is_hired=0, oxygen_planned=1,
        role=pl.lit("Climber"), nationality=pl.lit("USA"), probability=pl.lit(labels.mean()),
    )  # fmt: skip
    trained = TrainedModel("", pd.DataFrame(), np.empty(0))
    return Candidate(
        version,
        "same split",
        "archive",
        Known.AT_PUSH,
        predictions,
        members,
        "2019 Spring",
        trained,
    )


def test_two_gates_at_once_leave_one_champion_the_better(
    harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, (better, worse) = _versions(tmp_path)
    rng = np.random.default_rng(0)
    labels = (rng.random(2000) < 0.5).astype(float)
    good = np.clip(0.5 + 0.3 * (labels - 0.5) + rng.normal(0, 0.2, labels.size), 0, 1)
    flat = np.full(labels.size, 0.5)
    # Make the race certain: each gate pauses between reading the champion and moving it, and
    # the better one starts while the worse one pauses (a fixed head start would not do: on a
    # busy machine the first flow may take longer than that to reach its gate).
    decide = registry.decide
    worse_deciding = threading.Event()

    def slow_decide(*args: Any, **kwargs: Any) -> Any:
        decision = decide(*args, **kwargs)
        worse_deciding.set()
        time.sleep(2)
        return decision

    def better_once_the_worse_decides() -> bool:
        if not worse_deciding.wait(timeout=600):
            raise AssertionError("the worse candidate's gate never decided")
        return run_gate(_candidate(better, good, labels))

    monkeypatch.setattr(registry, "decide", slow_decide)
    # Versions without files to load: the gate's check that they are the models trained is
    # not what is tested here.
    monkeypatch.setattr(registry, "not_the_trained_model", lambda *_: None)

    @flow
    def run_gate(candidate: Candidate) -> bool:
        with slot(REGISTRY, ServicesConfig().slot_lease_s):
            client = MlflowClient(config.tracking_uri)
            return gate(client, config, BacktestConfig(), candidate).promoted

    mlflow.set_tracking_uri(config.tracking_uri)
    _concurrently(
        lambda: run_gate(_candidate(worse, flat, labels)),
        better_once_the_worse_decides,
    )
    client = MlflowClient(config.tracking_uri)
    champion = client.get_model_version_by_alias(config.registered_model, "champion")
    assert str(champion.version) == better
    decisions = {
        v: client.get_model_version(config.registered_model, v).tags["champion_decision"]
        for v in (better, worse)
    }
    # The worse one came first, with no champion yet: promoted, then beaten by the better one,
    # which the slot made compare with it instead of with an empty registry.
    assert decisions == {worse: "promoted", better: "promoted"}
    compared = client.get_model_version(config.registered_model, better).tags["compared_with"]
    assert compared == worse
