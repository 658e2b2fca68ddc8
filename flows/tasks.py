"""Prefect tasks around the `pipeline/` stages: caching, retries, assets. No stage logic here.

Each stage is a plain function here, turned into a materializing task by `stage_task` at run
time, because its asset keys name the warehouse, the features folder and the registry of *this*
run's settings. The stage modules are imported inside the functions so that loading a flow (the
worker, `prefect deploy`) does not import torch, MLflow and Great Expectations.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect import Task, task
from prefect.assets import Asset, add_asset_metadata, materialize
from prefect.cache_policies import INPUTS, TASK_SOURCE
from prefect.states import State
from prefect.tasks import exponential_backoff

from flows.fingerprints import Fingerprint, table_names
from pipeline.config import Settings
from pipeline.errors import PipelineError, QuotaExhausted
from pipeline.warehouse import connect

# The key is what the stage reads (its fingerprint) and the task's code; the Settings object, the
# run folder and the MLflow tags differ from run to run without changing the result.
STAGE_CACHE = INPUTS - "settings" - "run_dir" - "tags" + TASK_SOURCE

WEATHER_RETRIES = 3
WEATHER_BACKOFF_S = 10.0  # 10, 20, 40 s between tries: outlasts a short API outage


@dataclass(frozen=True)
class StageResult:
    """A stage's report and the facts of each asset it produced (asset key → rows, digest, …):
    kept with the cached result, so a reused stage still fills the lineage table."""

    report: Any
    assets: dict[str, dict[str, Any]]


def result_storage(settings: Settings) -> Path:
    """Where task results (and so the cache) persist, shared by the CLI and the worker.
    (A path, not an unsaved LocalFileSystem block: Prefect wants blocks saved server-side.)"""
    return settings.paths.var_dir / "prefect-results"


def retry_unless_quota(task: Task, task_run: Any, state: State) -> bool:
    """Retry a failed weather fetch, except when the daily quota is spent (retrying cannot help)."""
    try:
        state.result()
    except QuotaExhausted:
        return False
    except Exception:
        return True
    return False


def _cache_options(fn: Callable[..., Any], settings: Settings, refresh: bool) -> dict[str, Any]:
    return {
        "name": fn.__name__.removesuffix("_stage"),
        "cache_policy": STAGE_CACHE,
        "persist_result": True,
        "result_storage": result_storage(settings),
        "refresh_cache": refresh,
    }


def stage_task(
    fn: Callable[..., Any],
    settings: Settings,
    produces: list[Asset],
    depends_on: list[Asset],
    refresh: bool = False,
    **options: Any,
) -> Task:
    """`fn` as a cached task that materialises `produces` from `depends_on` (its lineage)."""
    return materialize(
        *produces, asset_deps=depends_on, **_cache_options(fn, settings, refresh), **options
    )(fn)


def cached_task(fn: Callable[..., Any], settings: Settings, refresh: bool = False) -> Task:
    return task(**_cache_options(fn, settings, refresh))(fn)


def weather_options() -> dict[str, Any]:
    return {
        "retries": WEATHER_RETRIES,
        "retry_delay_seconds": exponential_backoff(backoff_factor=WEATHER_BACKOFF_S),
        "retry_jitter_factor": 0.2,
        "retry_condition_fn": retry_unless_quota,
    }


def missing_tables(settings: Settings, tables: tuple[str, ...]) -> bool:
    """True when a stage's output table is gone: its cached result must not be reused then."""
    if not settings.paths.warehouse.exists():
        return True
    with connect(settings.paths.warehouse, read_only=True) as con:
        return not set(tables) <= table_names(con)


def _record(facts: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    for key, metadata in facts.items():
        add_asset_metadata(key, metadata)
    return facts


class IncompleteWeather(PipelineError):
    """Some weather responses were rejected: the task fails (and retries, fetching only what is
    missing) rather than caching a partial table as if it were the stage's result."""


def ingest_stage(
    settings: Settings, run_dir: Path, fingerprint: Fingerprint, assets: dict[str, str]
) -> StageResult:
    from pipeline.ingest import ingest_records

    report = ingest_records(settings, run_dir)
    sources = {item.table: item.source for item in report.sources}
    return StageResult(
        report,
        _record(
            {
                key: {
                    "rows": report.rows.get(table, 0),
                    "digest": report.digests.get(table, ""),
                    "source": sources.get(table, "all record sources"),
                }
                for table, key in assets.items()
            }
        ),
    )


def weather_stage(
    settings: Settings, run_dir: Path, fingerprint: Fingerprint, assets: dict[str, str]
) -> StageResult:
    from pipeline.weather import load_weather

    report = load_weather(settings, run_dir)
    if not report.complete:
        raise IncompleteWeather(
            f"weather: {len(report.rejected)} responses rejected, {report.missing_days:,} needed"
            " days missing; a retry fetches only what is missing"
        )
    facts = {"rows": report.rows, "digest": report.digest, "source": report.source}
    return StageResult(report, _record({assets["weather_daily"]: facts}))


def features_stage(
    settings: Settings, run_dir: Path, fingerprint: Fingerprint, assets: dict[str, str]
) -> StageResult:
    from pipeline.features import build_features

    report = build_features(settings, run_dir)
    facts = {"rows": report.rows, "digest": report.digest, "source": str(report.directory)}
    return StageResult(report, _record({key: facts for key in assets.values()}))


def train_stage(
    settings: Settings,
    run_dir: Path,
    fingerprint: Fingerprint,
    features_dir: Path,
    tags: dict[str, str],
) -> Any:
    """Train, log and register. The version it creates is materialised by `model_version`,
    because that asset's key (the version number) exists only once the registry assigned it."""
    from pipeline.train_stage import train_and_register

    return train_and_register(settings, features_dir, run_dir, tags)


def model_version_stage(
    settings: Settings, fingerprint: Fingerprint, asset: str, facts: dict[str, Any]
) -> StageResult:
    """Check the registered version exists, and record it as an asset with its facts."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=settings.mlflow.tracking_uri)
    version = client.get_model_version(settings.mlflow.registered_model, str(facts["version"]))
    return StageResult(version.version, _record({asset: {**facts, "source": version.source}}))
