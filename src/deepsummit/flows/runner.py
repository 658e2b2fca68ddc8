"""A stage declaration (`deepsummit/flows/stages.py`) turned into a Prefect task run: its cache key,
its assets and their upstreams, its edges in the run graph, and its row in the lineage table.

The cache key is deepsummit/flows/cache_keys.py's.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from uuid import UUID

from prefect import Task, get_run_logger, task
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.assets import add_asset_metadata, materialize
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
from prefect.concurrency.sync import concurrency
from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound
from prefect.runtime import deployment, flow_run
from prefect.states import State
from prefect.tasks import exponential_backoff

from deepsummit.contracts.training_report import LineageRow
from deepsummit.core.config import Settings, load_settings
from deepsummit.core.context import WAREHOUSE, RunContext
from deepsummit.core.errors import PipelineError
from deepsummit.core.sections import PathsConfig
from deepsummit.core.warehouse import writer_lock
from deepsummit.flows.cache_keys import STAGE_CACHE, cache_inputs
from deepsummit.flows.resources import RESOURCES
from deepsummit.flows.stage_ends import progress_key
from deepsummit.flows.stages import STAGES, Stage, outputs, producer, written


class IncompleteStage(PipelineError):
    """A stage's report says a rerun could still add to it (e.g. rejected weather responses):
    the task fails, and is retried, rather than caching a partial result as the stage's own."""


@dataclass(frozen=True)
class StageResult:
    """A stage's report and the facts of each asset it produced (asset key → rows, digest, …):
    kept with the cached result, so a reused stage still fills the lineage table."""

    report: Any
    assets: dict[str, dict[str, Any]]


# ---------------------------------------------------------------- the tasks


def result_storage(paths: PathsConfig) -> Path:
    """Where task results (and so the cache) persist, shared by the CLI and the worker.
    (A path, not an unsaved LocalFileSystem block: Prefect wants blocks saved server-side.)"""
    return paths.var_dir / "prefect-results"


def _retry_options(stage: Stage) -> dict[str, Any]:
    retry = stage.retry
    if retry is None:
        return {}

    def worth_retrying(failed: Task, task_run: Any, state: State) -> bool:
        try:
            state.result()
        except retry.never:
            return False
        except Exception:
            return True
        return False

    return {
        "retries": retry.retries,
        "retry_delay_seconds": exponential_backoff(backoff_factor=retry.backoff_s),
        "retry_jitter_factor": 0.2,
        "retry_condition_fn": worth_retrying,
    }


def ensure_limit(name: str, limit: int = 1) -> None:
    """The global concurrency limit `name` exists on the server (Prefect no longer creates one
    on first use, and would then hold nothing)."""
    with get_client(sync_client=True) as client:
        try:
            client.read_global_concurrency_limit_by_name(name)
        except ObjectNotFound:
            with contextlib.suppress(ObjectAlreadyExists):  # another run created it just now
                client.create_global_concurrency_limit(
                    GlobalConcurrencyLimitCreate(name=name, limit=limit)
                )


@contextlib.contextmanager
def slot(name: str, lease_s: float) -> Iterator[None]:
    """One of one: Prefect's global concurrency slot `name`, waited for as long as it takes
    (the holder's flow run shows in the UI's Concurrency page), leased for `lease_s` at a time.

    When the server stops answering while the slot is held, its lease cannot be renewed and
    runs out on the server. Prefect would then interrupt the block wherever it is (its
    `strict` default); the block is let finish instead: a warehouse writer also holds the
    warehouse's flock (`writer_lock`), which no lease ends, so no other writer on the machine
    can start meanwhile, and what a stage began it finishes (its transaction commits or rolls
    back as it would have). A release the server does not answer is logged, not raised: the
    server frees the slot when the lease runs out."""
    ensure_limit(name)
    logger = get_run_logger()
    logger.info("waiting for the %s slot", name)
    raised: BaseException | None = None
    try:
        with concurrency(
            name,
            occupy=1,
            strict=True,
            lease_duration=lease_s,
            raise_on_lease_renewal_failure=False,
        ):
            logger.info("holding the %s slot", name)
            try:
                yield
            except BaseException as error:
                raised = error
                raise
    except Exception as error:
        if error is raised:
            raise
        logger.warning(
            "%s slot not released (%s): the server frees it within %g s", name, error, lease_s
        )
        if raised is not None:
            raise raised from None


def writes_warehouse(stage: Stage) -> bool:
    return any(RESOURCES[name].in_warehouse for name in (*stage.writes, *stage.side_writes))


def run_stage_function(
    stage_name: str, cache_inputs: dict[str, Any], settings: Settings, run: RunContext
) -> StageResult:
    """The body of every stage task: call the stage's function, record its assets' facts."""
    stage = STAGES[stage_name]
    locations = {
        name: location
        for name in stage.reads
        if (location := RESOURCES[name].location(settings)) is not None
    }
    report = stage.load()(settings, run, **locations)
    problem = getattr(report, "problem", None)
    if problem:
        raise IncompleteStage(f"{stage_name}: {problem}")
    facts: dict[str, dict[str, Any]] = {}
    for resource in outputs(stage, settings):
        if resource.late:
            continue
        resource_facts = resource.facts(settings, report)
        for asset in resource.assets(settings):
            facts[asset.key] = resource_facts
            add_asset_metadata(asset.key, resource_facts)
    return StageResult(report, facts)


def publish_late_resource(
    resource_name: str, cache_inputs: dict[str, Any], facts: dict[str, Any], key: str
) -> StageResult:
    """Materialise what a stage created under a name it learnt only at the end (a model
    version): the asset event carries the stage's facts."""
    add_asset_metadata(key, facts)
    return StageResult(facts.get("version"), {key: facts})


def _task(
    settings: Settings, name: str, refresh: bool, produces: list, depends_on: list, **options: Any
) -> Any:
    """A cached task decorator; materialising `produces` (its upstream: `depends_on`) when the
    stage writes assets known before it runs."""
    options |= {
        "name": name,
        "asset_deps": depends_on,
        "cache_policy": STAGE_CACHE,
        "persist_result": True,
        "result_storage": result_storage(settings.paths),
        "refresh_cache": refresh,
    }
    return materialize(*produces, **options) if produces else task(**options)


# ---------------------------------------------------------------- progress


# The stages log through `logging.getLogger("deepsummit.…")`; Prefect forwards that logger to the
# run's logs (PREFECT_LOGGING_EXTRA_LOGGERS) but leaves its level to the root's WARNING, which
# would drop the per-epoch lines.
logging.getLogger("deepsummit").setLevel(logging.INFO)


@dataclass
class StageProgress:
    """A stage's `progress` callback in a flow run: a Prefect progress artifact, created at the
    first report and updated at each, and a log line each time."""

    stage: str
    artifact_id: UUID | None = None

    def __call__(self, done: float, total: float, message: str) -> None:
        percent = min(100.0, 100.0 * done / total) if total else 100.0
        description = f"{self.stage}: {done:,.0f} of {total:,.0f} ({message})"
        if self.artifact_id is None:
            self.artifact_id = create_progress_artifact(
                percent, key=progress_key(self.stage), description=description
            )
        else:
            update_progress_artifact(self.artifact_id, percent, description=description)
        get_run_logger().info("%s progress %.0f%%: %s", self.stage, percent, description)


# ---------------------------------------------------------------- a chain of stages


def run_tags(settings: Settings) -> dict[str, str]:
    """MLflow tags tying a training run to its Prefect flow run (not in any cache key)."""
    return {
        "prefect.flow_run_id": str(flow_run.get_id() or ""),
        "prefect.flow_run_name": str(flow_run.get_name() or ""),
        "prefect.deployment": str(deployment.get_name() or ""),
        "profile": settings.profile,
        "weather_source": settings.weather.source,
    }


@dataclass
class Chain:
    """One flow run's stages: the settings, the run context, what each stage produced this run
    (the states its readers wait for), the reports, and one lineage row per asset."""

    settings: Settings
    run: RunContext
    produced: dict[str, State] = field(default_factory=dict)
    reports: dict[str, Any] = field(default_factory=dict)
    lineage: list[LineageRow] = field(default_factory=list)
    # What the settings were loaded from: a stage run as another flow run loads the same.
    profile: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def start(cls, profile: str | None, overrides: dict[str, Any]) -> Chain:
        settings = load_settings(profile, overrides)
        run_dir = settings.paths.runs_dir / str(flow_run.get_id() or "local")
        run_dir.mkdir(parents=True, exist_ok=True)
        exclusive = functools.partial(slot, lease_s=settings.services.slot_lease_s)
        context = RunContext(run_dir=run_dir, tags=run_tags(settings), exclusive=exclusive)
        return cls(settings, context, profile=profile, overrides=overrides)

    def adopt(self, stage: Stage, report: Any, lineage: list[LineageRow]) -> None:
        """Take the report and lineage rows of `stage` run by another flow run as this chain's."""
        self.reports[stage.name] = report
        self.lineage.extend(lineage)

    def _require_inputs(self, stage: Stage) -> None:
        for name in stage.reads:
            if name in stage.optional:
                continue
            if name in self.produced or RESOURCES[name].present(self.settings):
                continue
            writer = producer(name)
            hint = RESOURCES[name].missing_hint or (
                f"run `deepsummit {writer.name}` first" if writer else ""
            )
            hint = f"; {hint}" if hint else ""
            raise PipelineError(f"{stage.name}: its input {name} does not exist yet{hint}")

    def run_stage(self, stage: Stage) -> Any:
        """Run `stage` as a cached, materialising task after the stages it reads from; a stage
        that writes the warehouse holds its slot, then the warehouse's flock, from reading its
        inputs to its result, so another run's writer cannot change them in between (the
        flock also keeps out a writer on a temporary Prefect server, which shares no slot)."""
        if not writes_warehouse(stage):
            return self._run_stage(stage)
        logger = get_run_logger()
        holder = f"the {stage.name} stage of flow run {flow_run.get_name() or 'local'}"
        with (
            slot(WAREHOUSE, self.settings.services.slot_lease_s),
            writer_lock(self.settings.paths.warehouse, holder, logger.info),
        ):
            return self._run_stage(stage)

    def _run_stage(self, stage: Stage) -> Any:
        self._require_inputs(stage)
        settings = self.settings
        inputs = cache_inputs(stage, settings)
        read_assets = self._read_assets(stage, inputs)
        produces = [a for r in outputs(stage, settings) if not r.late for a in r.assets(settings)]
        refresh = not stage.cached or not all(
            r.present(settings) for r in written(stage, settings) if not r.late
        )
        upstream_states = [
            *(self.produced[n] for n in stage.reads if n in self.produced),
            *(self.produced[n] for n in stage.after if n in self.produced),
        ]
        upstream = list({id(s): s for s in upstream_states}.values())
        stage_task = _task(
            settings, stage.name, refresh, produces, read_assets, **_retry_options(stage)
        )(run_stage_function)
        state = stage_task(
            stage_name=stage.name,
            cache_inputs=inputs,
            settings=settings,
            run=replace(self.run, progress=StageProgress(stage.name)),
            wait_for=upstream,
            return_state=True,
        )
        result: StageResult = state.result()
        get_run_logger().info("%s: %s", stage.name, state.name)
        self.reports[stage.name] = result.report
        for key, facts in result.assets.items():
            self.lineage.append(
                LineageRow(stage.name, key, facts.get("rows"), facts.get("digest", ""), state.name)
            )
        for name in stage.writes:
            self.produced[name] = state
        for resource in (r for r in outputs(stage, settings) if r.late):
            self.produced[resource.name] = self._publish(stage, resource, inputs, state, result)
        return result.report

    def _read_assets(self, stage: Stage, inputs: dict[str, Any]) -> list[Any]:
        """The assets of what `stage` reads (none for an optional read that is absent)."""
        return [
            asset
            for name in stage.reads
            if inputs["reads"][name] != "absent"
            for asset in RESOURCES[name].assets(self.settings)
        ]

    def _publish(
        self, stage: Stage, resource: Any, inputs: dict[str, Any], after: State, result: Any
    ) -> State:
        """The second task of a stage with a late output (see `publish_late_resource`)."""
        settings, report = self.settings, result.report
        (asset,) = resource.assets(settings, report)
        facts = resource.facts(settings, report)
        read_assets = self._read_assets(stage, inputs)
        state = _task(settings, resource.name, False, [asset], read_assets)(publish_late_resource)(
            resource_name=resource.name,
            cache_inputs=inputs,
            facts=facts,
            key=asset.key,
            wait_for=[after],
            return_state=True,
        )
        state.result()
        self.lineage.append(
            LineageRow(
                stage.name,
                asset.key,
                facts.get("rows"),
                facts.get("digest", ""),
                after.name,
                resource.links(report),
            )
        )
        return state
