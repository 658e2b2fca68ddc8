"""The pipeline, declared once: each stage's function, what it reads and writes, and the settings
that change what it produces.

Everything else is derived from these declarations (`deepsummit/flows/runner.py`): the flow bodies,
the asset keys and their upstreams, the cache keys, when a cached result must be recomputed (an
output is gone), the task edges Prefect draws in the run graph, and the one-line error when a stage
is run before the stage that writes its input. Adding a stage is one entry here plus its function in
`deepsummit/`.

Functions are named as "module:function" and imported when the stage runs, so that loading a
flow (the worker, `prefect deploy`) does not import torch, MLflow and Great Expectations. A
stage function is called as `function(settings, run_context, **locations)`, where `locations`
holds the path of each read resource that has one (the train stage gets `features_snapshot`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from deepsummit.core.errors import PipelineError, QuotaExhausted
from deepsummit.features.tabular import HISTORY_TABLES
from deepsummit.flows.resources import RAW_RECORD_TABLES, RESOURCES
from deepsummit.flows.stage_resource import Resource


@dataclass(frozen=True)
class Retry:
    """Retries of a failed stage task, with exponential backoff; never for errors in `never`."""

    retries: int
    backoff_s: float  # the first delay; each next one doubles
    never: tuple[type[BaseException], ...] = ()


@dataclass(frozen=True)
class Stage:
    name: str
    function: str  # "module:function" in a stage package
    reads: tuple[str, ...]  # resource names (deepsummit/flows/resources.py)
    writes: tuple[str, ...]  # its outputs: materialised as Prefect assets, in its lineage
    settings: tuple[str, ...]  # dotted settings paths, e.g. "features" or "weather.source"
    description: str
    retry: Retry | None = field(default=None)
    # False for a stage whose output depends on the time it runs (a forecast, today's
    # outlook): it runs every time, never served from the cache.
    cached: bool = True
    # What else it writes, not its outputs: raw copies, bookkeeping and intermediate tables
    # (tests/flows/test_declarations.py holds a stage to these and its outputs).
    side_writes: tuple[str, ...] = ()
    # Reads the stage can do without: absent, they enter the cache key as "absent" and the
    # stage says what it could not do.
    optional: tuple[str, ...] = ()
    # What an earlier stage of the chain writes that this one must wait for although it does
    # not read it.
    after: tuple[str, ...] = ()

    @property
    def module(self) -> str:
        return self.function.split(":")[0]

    def load(self) -> Callable[..., Any]:
        module, name = self.function.split(":")
        return getattr(importlib.import_module(module), name)


INGEST = Stage(
    "ingest",
    "deepsummit.records.stage:ingest_records",
    reads=("record_sources",),
    writes=("members", "expeditions", "expedition_details", "peaks", "quarantine"),
    side_writes=RAW_RECORD_TABLES,
    settings=("sources",),
    description="Load the Himalayan Database records into the warehouse (clean tables + "
    "quarantine).",
)
WEATHER = Stage(
    "weather",
    "deepsummit.weather.stage:load_weather",
    reads=("members", "expeditions", "peaks", "weather_source"),
    writes=("weather_daily",),
    side_writes=("weather_api_calls", "quarantine"),
    settings=("weather",),
    description="Load daily weather for the attempts' 90-day windows into weather_daily.",
    # 10, 20, 40 s between tries: outlasts a short API outage. A spent daily quota is not
    # retried: the next run (tomorrow) fetches only what is missing.
    retry=Retry(retries=3, backoff_s=10.0, never=(QuotaExhausted,)),
)
FEATURES = Stage(
    "features",
    "deepsummit.features.stage:build_features",
    reads=("members", "expeditions", "expedition_details", "peaks", "weather_daily"),
    writes=("features", "features_snapshot"),
    side_writes=(
        "attempt_candidates",
        "attempts",
        "attempt_exclusions",
        "weather_windows",
        *HISTORY_TABLES,
    ),
    settings=("features", "weather.source"),
    description="Build attempts, weather windows and the model inputs (a features snapshot).",
)
TRAIN = Stage(
    "train",
    "deepsummit.train.stage:train_and_register",
    reads=("features_snapshot",),
    writes=("model_version",),
    settings=("model", "train", "mlflow"),
    description="Train on a features snapshot, compare with the baselines, log to MLflow, "
    "register behind the champion gate.",
)

DRIFT = Stage(
    "drift",
    "deepsummit.drift.stage:check_drift",
    reads=("features_snapshot", "champion_model"),
    writes=("drift_report",),
    settings=("drift",),
    description="Compare the newest season's inputs with the champion's training split.",
    # Without a champion (a first run that registered none, a retrospective profile) the report
    # says it did not compare.
    optional=("champion_model",),
    # The champion it reads is the one the train stage may just have registered and promoted.
    after=("model_version",),
)

BACKTEST = Stage(
    "backtest",
    "deepsummit.backtest.stage:backtest",
    reads=("features_snapshot", "attempts", "weather_daily"),
    writes=("backtest_report",),
    settings=("backtest", "model", "train"),
    description="Rolling-origin backtest of the snapshot: season by season and push day by "
    "push day, the transformer against LightGBM, logistic regression and climatology.",
)

FORECAST = Stage(
    "forecast",
    "deepsummit.weather.stage:load_forecast",
    reads=("peaks", "forecast_api"),
    writes=("forecast_weather",),
    side_writes=("weather_api_calls", "quarantine"),
    settings=("forecast", "outlook.peaks", "outlook.without_weather"),
    description="Fetch the Open-Meteo forecast of the outlook's peaks into weather_daily, "
    "under the source of its issue time.",
    retry=Retry(retries=3, backoff_s=10.0, never=(QuotaExhausted,)),
    cached=False,
)
OUTLOOK = Stage(
    "outlook",
    "deepsummit.serve.stage:plan_outlook",
    reads=("forecast_weather", "champion_model"),
    writes=("outlooks",),
    settings=("outlook",),
    description="P(summit) per candidate push day for each member and the team, by the "
    "champion from the newest forecast, into the outlooks table.",
    cached=False,
)

REPLAY = Stage(
    "replay",
    "deepsummit.serve.stage:replay_outlook",
    reads=("weather_daily", "champion_model"),
    writes=(),
    settings=("outlook", "weather.source"),
    description="The outlook a team would have seen on a past morning, by the champion, from "
    "the stored weather (the archive as a perfect forecast).",
    cached=False,
)

# The chains, in order: `summit/train` and `summit/outlook`. Every stage reads what an earlier
# stage of its chain writes, what another chain writes (checked when the stage runs), or what
# comes from outside.
CHAIN: tuple[Stage, ...] = (INGEST, WEATHER, FEATURES, TRAIN, DRIFT)
OUTLOOK_CHAIN: tuple[Stage, ...] = (FORECAST, OUTLOOK)
# `summit/outlook` with outlook.as_of set: a replay of a past morning.
REPLAY_CHAIN: tuple[Stage, ...] = (REPLAY,)
# `summit/backtest`: its own job (weekly, off-season), on the snapshot `summit/train` built.
BACKTEST_CHAIN: tuple[Stage, ...] = (BACKTEST,)
STAGES: dict[str, Stage] = {
    stage.name: stage for stage in (*CHAIN, *OUTLOOK_CHAIN, *REPLAY_CHAIN, *BACKTEST_CHAIN)
}
EXTERNAL: frozenset[str] = frozenset(
    {"record_sources", "weather_source", "forecast_api", "champion_model"}
)


def outputs(stage: Stage, settings: Any) -> list[Resource]:
    """The outputs `stage` writes with these settings."""
    return [RESOURCES[name] for name in stage.writes if RESOURCES[name].applies(settings)]


def written(stage: Stage, settings: Any) -> list[Resource]:
    """Everything `stage` writes with these settings: its outputs and side writes (a raw table
    of a layout the sources do not read is not written)."""
    names = (*stage.writes, *stage.side_writes)
    return [RESOURCES[name] for name in names if RESOURCES[name].applies(settings)]


def producer(resource: str) -> Stage | None:
    """The stage that writes `resource` (None for an input from outside)."""
    return next((stage for stage in STAGES.values() if resource in stage.writes), None)


def task_name(resource: str) -> str:
    """The task that produces `resource`: its stage's, or its own for a late output."""
    writer = producer(resource)
    assert writer is not None, resource
    return resource if RESOURCES[resource].late else writer.name


def task_edges(chain: tuple[Stage, ...] = CHAIN) -> set[tuple[str, str]]:
    """(upstream task, downstream task) pairs the run graph draws: each stage after the stages
    that write what it reads, and a late output's task after its stage."""
    edges = set()
    for stage in chain:
        edges |= {
            (writer.name, stage.name)
            for r in stage.reads
            if (writer := producer(r)) is not None and writer in chain
        }
        edges |= {(stage.name, r) for r in stage.writes if RESOURCES[r].late}
        edges |= {(task_name(r), stage.name) for r in stage.after if producer(r) in chain}
    return edges


def check_chain(chain: tuple[Stage, ...] = CHAIN) -> None:
    """Every name is a known resource, and every read is written by an earlier stage of the
    chain, by another chain, or outside."""
    written: set[str] = set(EXTERNAL)
    written |= {
        name
        for stage in STAGES.values()
        if stage not in chain
        for name in (*stage.writes, *stage.side_writes)
    }
    for stage in chain:
        declared = (*stage.reads, *stage.writes, *stage.side_writes)
        unknown = [name for name in declared if name not in RESOURCES]
        if unknown:
            raise PipelineError(f"stage {stage.name}: unknown resource(s) {', '.join(unknown)}")
        unmet = [name for name in stage.reads if name not in written]
        if unmet:
            raise PipelineError(
                f"stage {stage.name} reads {', '.join(unmet)}, which no earlier stage writes"
            )
        written.update(stage.writes)


check_chain(CHAIN)
check_chain(OUTLOOK_CHAIN)
check_chain(REPLAY_CHAIN)
check_chain(BACKTEST_CHAIN)
