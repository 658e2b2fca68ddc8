"""The train stage as a flow run of its own: the flow `summit-train`, deployed once per work pool
(`summit-train/local`, `summit-train/gpu` in prefect.yaml), which `summit/train` starts as its
child and waits for.

The chain hands the features snapshot over through the MLflow server, by URI and digest
(deepsummit/train/snapshot_store.py), never through a disk: the training worker may be another
machine. The training flow run fetches it into its own cache and runs the same cached stage task
as an in-process chain would: the task's cache key holds the snapshot's content digest, not where
it lies, so a rerun with nothing changed trains nothing wherever it runs.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.client.orchestration import SyncPrefectClient, get_client
from prefect.client.schemas.filters import (
    FlowFilter,
    FlowFilterName,
    FlowRunFilter,
    FlowRunFilterParentFlowRunId,
)
from prefect.client.schemas.objects import FlowRun, WorkerStatus
from prefect.deployments import run_deployment
from prefect.exceptions import ObjectNotFound
from prefect.runtime import flow_run
from prefect.settings import get_current_settings
from prefect.states import Cancelled, Cancelling, Crashed, State

from deepsummit.contracts.training_lease import Lease
from deepsummit.contracts.training_report import Build, TrainingReport
from deepsummit.core.config import Settings, deep_merge, load_settings
from deepsummit.core.errors import PipelineError
from deepsummit.core.sections import TrainConfig
from deepsummit.core.service_sections import ServicesConfig
from deepsummit.flows.artifacts import link
from deepsummit.flows.handover import hand_over, handed_over
from deepsummit.flows.runner import Chain
from deepsummit.flows.stages import TRAIN

TRAINING_FLOW = "summit-train"
# Under features.features_dir, beside the snapshots this machine builds (one level deeper, so
# that `newest_features_dir` never takes a fetched copy for a snapshot built here).
FETCHED_DIR = "fetched"
# The label a Prefect worker gives each flow run it starts (prefect/workers/base.py).
WORKER_NAME_LABEL = "prefect.worker.name"


def fetched_snapshot(settings: Settings, uri: str, digest: str) -> Path:
    """The snapshot published at `uri`, checked against `digest`, in this worker's cache."""
    from deepsummit.train.snapshot_store import fetch_snapshot

    cache = settings.features.features_dir / FETCHED_DIR
    return fetch_snapshot(settings.mlflow, uri, digest, cache)


def training_deployment(settings: Settings) -> str | None:
    """The deployment `train.deployment` where a worker can run it now; otherwise None, said in
    one line (no such deployment, no such work pool, or no online worker on it)."""
    name = settings.train.deployment
    if not name:
        return None
    with get_client(sync_client=True) as client:
        try:
            pool = client.read_deployment_by_name(name).work_pool_name
        except ObjectNotFound:
            return _in_process(settings, f"no deployment {name!r}")
        if pool is None:
            return _in_process(settings, f"deployment {name!r} has no work pool")
        try:
            client.read_work_pool(pool)
        except ObjectNotFound:
            return _in_process(settings, f"no work pool {pool!r}")
        workers = client.read_workers_for_work_pool(pool)
    if not any(worker.status == WorkerStatus.ONLINE for worker in workers):
        return _in_process(settings, f"no worker on pool {pool!r}")
    return name


def _in_process(settings: Settings, reason: str) -> None:
    """None, said in one line, where this machine may train; else the chain fails in one line
    before it publishes anything (a GPU profile without `train.cpu_fallback`)."""
    from deepsummit.train.trainer import resolve_device

    try:
        resolve_device(settings.train)
    except PipelineError as refused:
        raise PipelineError(f"train: {reason}, and here {refused}") from None
    get_run_logger().warning("train: %s — training in this process", reason)
    return None


def flow_run_link(run: FlowRun) -> str:
    """The flow run's name, linked to its page where the Prefect UI's address is known."""
    ui = get_current_settings().ui_url
    return link(f"flow run {run.name}", f"{ui}/runs/flow-run/{run.id}" if ui else None)


def training_flow_run_id(chain_run: FlowRun) -> str:
    """The flow run that trained for the chain's flow run `chain_run`: its completed child of the
    training flow (a child whose worker was lost ended Crashed, and the one started after it
    completed), or the chain's run itself where it trained in its own process."""
    with get_client(sync_client=True) as client:
        children = client.read_flow_runs(
            flow_filter=FlowFilter(name=FlowFilterName(any_=[TRAINING_FLOW])),
            flow_run_filter=FlowRunFilter(
                parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[chain_run.id])
            ),
        )
    completed = [child for child in children if child.state and child.state.is_completed()]
    return str(next(iter(completed or children), chain_run).id)


def train_in_deployment(chain: Chain, deployment: str) -> None:
    """Publish the chain's snapshot, run the train stage as a child flow run of `deployment`,
    wait for it (restarts, deadlines and the training lease: `run_training`), and take its
    report, checked against this side's build, and lineage rows as the chain's own."""
    from deepsummit.train.snapshot_store import publish_snapshot

    settings = chain.settings
    published = publish_snapshot(settings.mlflow, chain.reports["features"].directory)
    get_run_logger().info("train: on %s, snapshot %s", deployment, published.uri)
    build = Build.of(settings)
    parameters = {
        "snapshot_uri": published.uri,
        "snapshot_digest": published.digest,
        "package_version": build.package_version,
        "model_spec": build.model_spec,
        "profile": chain.profile,
        "overrides": chain.overrides,
    }
    name = f"{flow_run.get_name() or 'local'}-train"
    run = run_training(deployment, parameters, name, settings, published.run_id)
    # Not the flow run's Prefect result: that stays on the training worker's own disk.
    report = handed_over(settings.mlflow, run.id, build)
    where = flow_run_link(run)
    rows = [replace(row, links=f"{where} {row.links}".strip()) for row in report.lineage]
    chain.adopt(TRAIN, report, rows)


def run_training(
    deployment: str,
    parameters: dict[str, Any],
    name: str,
    settings: Settings,
    lease_run_id: str | None = None,
) -> FlowRun:
    """A child flow run `name` of `deployment`, completed; started again as a new flow run
    where its worker was lost or its process crashed, at most `train.worker_lost_restarts` times
    (the new run resumes from the training's uploaded checkpoint). Past a deadline, or once it
    ended otherwise, the chain fails in one line. Each run started is granted the training
    lease on the MLflow run `lease_run_id`, which fences off the one before it."""
    train = settings.train

    def start(run_name: str) -> FlowRun:
        run = _start_training(deployment, parameters, run_name)
        if lease_run_id is not None:
            Lease(lease_run_id, str(run.id)).grant(settings.mlflow)
        return run

    run = start(name)
    for restart in range(1, train.worker_lost_restarts + 2):
        run, lost = _wait_for_training(run, train, settings.services)
        if lost is None and run.state is not None and run.state.is_crashed():
            lost = f"crashed ({(run.state.message or 'no message').splitlines()[0]})"
        elif lost is not None:
            _end(run, Crashed(message=f"flow run {lost}"))
        if lost is None:
            break
        if restart > train.worker_lost_restarts:
            raise PipelineError(f"train: flow run {run.name} {lost}; no restart left")
        lost_run = run
        run = start(f"{name}-{restart + 1}")
        get_run_logger().warning(
            "train: flow run %s %s; started again as flow run %s", lost_run.name, lost, run.name
        )
    state = run.state
    if state is None or not state.is_completed():
        ended = f"{state.name}: {state.message or 'no message'}" if state else "no state"
        raise PipelineError(f"train: flow run {run.name} of {deployment} ended {ended}")
    return run


def train_here(chain: Chain) -> None:
    """The train stage in the chain's own process; its report kept as the chain shows it, as a
    training flow run elsewhere hands it back."""
    report = chain.run_stage(TRAIN)
    rows = [row for row in chain.lineage if row.stage == TRAIN.name]
    chain.reports[TRAIN.name] = report.handed(Build.of(chain.settings), rows)


def _start_training(deployment: str, parameters: dict[str, Any], name: str) -> FlowRun:
    """A new child flow run of `deployment`, scheduled: any worker of its pool may take it."""
    return run_deployment(
        deployment, parameters=parameters, flow_run_name=name, timeout=0, tags=["deepsummit"]
    )


def _wait_for_training(
    run: FlowRun, train: TrainConfig, services: ServicesConfig
) -> tuple[FlowRun, str | None]:
    """`run` once it has ended, with None; or as it stands once the worker that took it has
    been silent for `train.worker_lost_s`, with what happened in words. Past
    `train.pickup_deadline_s` before a worker starts it, or `train.training_deadline_s` after,
    it is cancelled and the chain fails in one line naming the deadline.

    Silence and deadlines are timed here, by this machine's clock, not against the server's
    (the chain's machine and the server's may differ): a worker's silence from when its last
    heartbeat time on the server last changed, the training from when it was first seen
    running."""
    heard: dict[str, tuple[Any, float]] = {}  # worker → (its last heartbeat time, seen at)
    scheduled, started = time.monotonic(), None
    with get_client(sync_client=True) as client:
        while True:
            run = client.read_flow_run(run.id)
            if run.state is not None and run.state.is_final():
                return run, None
            if started is None and run.state is not None and run.state.is_running():
                started = time.monotonic()
            _enforce_deadlines(run, train, time.monotonic() - (started or scheduled), started)
            worker = run.labels.get(WORKER_NAME_LABEL)
            if worker is not None and run.work_pool_name is not None:
                silent_s = _silence(client, run.work_pool_name, str(worker), heard)
                if silent_s > train.worker_lost_s:
                    return run, f"lost its worker {worker} (no heartbeat for {silent_s:.0f} s)"
            time.sleep(services.worker_query_s)


def _enforce_deadlines(
    run: FlowRun, train: TrainConfig, waited_s: float, started: float | None
) -> None:
    """Cancel `run` and fail in one line once it has waited past its deadline: for a worker
    to start it (`started` None), or for its training to end. Cancelled, a scheduled run is
    never taken by a worker later, and a running one is stopped by its worker."""
    if started is None and waited_s > train.pickup_deadline_s:
        _end(run, Cancelled(message="not picked up by train.pickup_deadline_s"))
        raise PipelineError(
            f"train: flow run {run.name} was not picked up by a worker of pool "
            f"{run.work_pool_name!r} within train.pickup_deadline_s ({train.pickup_deadline_s:g} "
            "s): cancelled"
        )
    if started is not None and waited_s > train.training_deadline_s:
        _end(run, Cancelling(message="past train.training_deadline_s"))
        raise PipelineError(
            f"train: flow run {run.name} still training after train.training_deadline_s "
            f"({train.training_deadline_s:g} s): cancelled"
        )


def _silence(
    client: SyncPrefectClient, pool: str, worker: str, heard: dict[str, tuple[Any, float]]
) -> float:
    """Seconds since `worker`'s heartbeat on `pool` was first seen as it stands now (`heard`
    keeps what was seen); a worker the server no longer lists has its last one as it was."""
    workers = client.read_workers_for_work_pool(pool)
    beat = next((w.last_heartbeat_time for w in workers if w.name == worker), None)
    seen = heard.get(worker)
    if seen is None or (beat is not None and beat != seen[0]):
        heard[worker] = (beat, time.monotonic())
        return 0.0
    return time.monotonic() - seen[1]


def _end(run: FlowRun, state: State) -> None:
    """Force `run` into `state`: Crashed where its worker took its process with it (nobody else
    will end it), Cancelled or Cancelling where the chain gives up on it."""
    with get_client(sync_client=True) as client:
        client.set_flow_run_state(run.id, state, force=True)


@flow(name=TRAINING_FLOW, log_prints=True)
def train_stage(
    snapshot_uri: str,
    snapshot_digest: str,
    package_version: str,
    model_spec: str,
    profile: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> TrainingReport:
    """Train, register and gate a model on the features snapshot published at `snapshot_uri`
    (started by summit/train, whose child flow run it is).

    Args:
        snapshot_uri: where the chain published its features snapshot (runs:/<run id>/features).
        snapshot_digest: the sha256 of its files; a download of other files is refused.
        package_version: the chain's deepsummit version; another one here is refused.
        model_spec: the chain's model spec digest; another one here is refused.
        profile: settings profile of deepsummit.toml the chain runs with.
        overrides: the chain's settings overrides, nested as in deepsummit.toml.
    """
    settings = load_settings(profile, overrides or {})
    build = Build.of(settings)
    build.refuse_other(Build(package_version, model_spec), "the chain that started it")
    folder = fetched_snapshot(settings, snapshot_uri, snapshot_digest)
    # Held on the run the snapshot was published as (runs:/<run id>/features): the chain names
    # this flow run there as it starts it.
    lease = Lease(snapshot_uri.removeprefix("runs:/").split("/")[0], str(flow_run.get_id()))
    here = {"train": {"snapshot": str(folder), "lease": str(lease)}}
    chain = Chain.start(profile, deep_merge(overrides or {}, here))
    report = chain.run_stage(TRAIN).handed(build, chain.lineage)
    hand_over(settings.mlflow, report.mlflow_run_id, report)
    return report
