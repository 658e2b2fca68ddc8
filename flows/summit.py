"""The `summit` flow (the whole chain, deployed as `summit/train`) and one flow per stage.

Flows only orchestrate: settings from the parameters, a run folder, the stage tasks in order,
and the lineage and summary artifacts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.runtime import deployment, flow_run

from flows import assets, fingerprints, tasks
from flows.artifacts import LineageRow, lineage_markdown, link, summary_markdown
from pipeline.config import Settings, load_settings, nested_overrides

LINEAGE_ARTIFACT = "deepsummit-lineage"
SUMMARY_ARTIFACT = "deepsummit-run-summary"
SUMMARY_FILE = "summary.json"  # in the run folder: what `deepsummit main-job` prints


@dataclass
class Chain:
    """What a run has done so far: the settings, its folder, and one lineage row per asset."""

    settings: Settings
    run_dir: Path
    lineage: list[LineageRow] = field(default_factory=list)

    def run(self, stage: str, task: Any, **params: Any) -> Any:
        """Run a stage task; note its assets (whether computed now or reused from the cache)."""
        state = task(settings=self.settings, run_dir=self.run_dir, **params, return_state=True)
        result = state.result()
        get_run_logger().info("%s: %s", stage, state.name)
        for key, facts in result.assets.items():
            self.lineage.append(
                LineageRow(stage, key, facts.get("rows"), facts.get("digest", ""), state.name)
            )
        return result.report


def start_chain(profile: str | None, overrides: dict[str, Any]) -> Chain:
    settings = load_settings(profile, overrides)
    run_dir = settings.paths.runs_dir / str(flow_run.get_id() or "local")
    run_dir.mkdir(parents=True, exist_ok=True)
    return Chain(settings, run_dir)


def ingest(chain: Chain) -> Any:
    settings = chain.settings
    produced = {t: assets.table_asset(settings, t) for t in (*assets.CLEAN_TABLES, "quarantine")}
    task = tasks.stage_task(
        tasks.ingest_stage,
        settings,
        produces=list(produced.values()),
        depends_on=assets.record_source_assets(settings),
        refresh=tasks.missing_tables(settings, tuple(produced)),
    )
    return chain.run(
        "ingest",
        task,
        fingerprint=fingerprints.ingest_fingerprint(settings),
        assets={table: asset.key for table, asset in produced.items()},
    )


def weather(chain: Chain) -> Any:
    settings = chain.settings
    produced = assets.weather_asset(settings)
    task = tasks.stage_task(
        tasks.weather_stage,
        settings,
        produces=[produced],
        depends_on=[
            *(assets.table_asset(settings, t) for t in assets.CLEAN_TABLES),
            assets.weather_source_asset(settings),
        ],
        refresh=tasks.missing_tables(settings, ("weather_daily",)),
        **tasks.weather_options(),
    )
    return chain.run(
        "weather",
        task,
        fingerprint=fingerprints.weather_fingerprint(settings),
        assets={"weather_daily": produced.key},
    )


def features(chain: Chain) -> Any:
    settings = chain.settings
    produced = {
        "features": assets.features_table_asset(settings),
        "snapshots": assets.features_snapshots_asset(settings),
    }
    task = tasks.stage_task(
        tasks.features_stage,
        settings,
        produces=list(produced.values()),
        depends_on=[
            *(assets.table_asset(settings, t) for t in assets.CLEAN_TABLES),
            assets.weather_asset(settings),
        ],
        refresh=tasks.missing_tables(settings, ("features",))
        or not settings.features.features_dir.exists(),
    )
    return chain.run(
        "features",
        task,
        fingerprint=fingerprints.features_fingerprint(settings),
        assets={name: asset.key for name, asset in produced.items()},
    )


def train(chain: Chain, features_dir: Path) -> Any:
    """Train and register, then materialise the registered version (lineage: features → it)."""
    settings = chain.settings
    fingerprint = fingerprints.train_fingerprint(settings, features_dir)
    trained_state = tasks.cached_task(tasks.train_stage, settings)(
        settings=settings,
        run_dir=chain.run_dir,
        fingerprint=fingerprint,
        features_dir=features_dir,
        tags=run_tags(settings),
        return_state=True,
    )
    report = trained_state.result()
    get_run_logger().info("train: %s", trained_state.name)
    produced = assets.model_version_asset(settings, report.model_version, report.model_url)
    facts = {
        "version": str(report.model_version),
        "run_id": report.mlflow_run_id,
        "champion": report.champion,
        "decision": report.decision_reason,
        "rows": report.rows["train"],
        "digest": report.digest,
    }
    version_task = tasks.stage_task(
        tasks.model_version_stage,
        settings,
        produces=[produced],
        depends_on=assets.features_assets(settings),
    )
    state = version_task(
        settings=settings, fingerprint=fingerprint, asset=produced.key, facts=facts,
        return_state=True,
    )  # fmt: skip
    state.result()
    links = (
        f"{link('MLflow run', report.run_url)} {link(f'v{report.model_version}', report.model_url)}"
    )
    chain.lineage.append(
        LineageRow("train", produced.key, facts["rows"], report.digest, trained_state.name, links)
    )
    return report


def run_tags(settings: Settings) -> dict[str, str]:
    """MLflow tags tying the training run to its Prefect flow run (excluded from the cache key)."""
    return {
        "prefect.flow_run_id": str(flow_run.get_id() or ""),
        "prefect.flow_run_name": str(flow_run.get_name() or ""),
        "prefect.deployment": str(deployment.get_name() or ""),
        "profile": settings.profile,
        "weather_source": settings.weather.source,
    }


def publish(chain: Chain, report: Any, data_docs: Path) -> dict[str, Any]:
    """The lineage and summary artifacts, and summary.json for `deepsummit main-job`."""
    name = str(flow_run.get_name() or "local")
    create_markdown_artifact(
        key=LINEAGE_ARTIFACT,
        markdown=lineage_markdown(chain.lineage, name),
        description="Assets of this run: key, rows, content digest, MLflow links",
    )
    create_markdown_artifact(
        key=SUMMARY_ARTIFACT,
        markdown=summary_markdown(report),
        description="Test metrics against the baselines and the champion decision",
    )
    summary = {
        "flow_run_id": str(flow_run.get_id() or ""),
        "run_dir": str(chain.run_dir),
        "model_version": str(report.model_version),
        "champion": report.champion,
        "model_version_url": report.model_url,
        "mlflow_run_url": report.run_url,
        "data_docs": str(data_docs),
        "assets": [row.asset_key for row in chain.lineage],
    }
    (chain.run_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=2))
    return summary


def overrides_from(
    data_dir: str | None = None,
    warehouse: str | None = None,
    weather_source: str | None = None,
    api_url: str | None = None,
    train_until: int | None = None,
    validation_until: int | None = None,
    test_until: int | None = None,
    max_train_rows: int | None = None,
    tracking_uri: str | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Settings overrides from flow parameters / CLI options; None means "from config"."""
    return nested_overrides(
        {
            "paths.data_dir": data_dir,
            "paths.warehouse": warehouse,
            "weather.source": weather_source,
            "weather.api_url": api_url,
            "features.split.train_until": train_until,
            "features.split.validation_until": validation_until,
            "features.split.test_until": test_until,
            "train.max_train_rows": max_train_rows,
            "mlflow.tracking_uri": tracking_uri,
        },
        base=extra,
    )


@flow(name="summit", log_prints=True)
def summit(
    profile: str | None = None,
    data_dir: str | None = None,
    warehouse: str | None = None,
    weather_source: Literal["archive", "open-meteo"] | None = None,
    api_url: str | None = None,
    train_until: int | None = None,
    validation_until: int | None = None,
    test_until: int | None = None,
    max_train_rows: int | None = None,
    tracking_uri: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Ingest → weather → features → train and register; every stage cached on its inputs.

    Args:
        profile: settings profile of deepsummit.toml (cpu, base, tiny); blank = the file's default.
        data_dir: folder of the data bundle; blank = paths.data_dir (the bundled ../shared/data).
        warehouse: DuckDB warehouse file; blank = paths.warehouse.
        weather_source: archive (the bundled ERA5 file) or open-meteo (the live API).
        api_url: Open-Meteo archive endpoint (for open-meteo); blank = weather.api_url.
        train_until: last expedition year of the training split.
        validation_until: last year of the validation split.
        test_until: last year of the test split.
        max_train_rows: train on at most this many rows (a quick slice); blank = all.
        tracking_uri: MLflow tracking URI; blank = mlflow.tracking_uri (the local server).
        overrides: any other settings, nested as in deepsummit.toml,
            e.g. {"train": {"max_epochs": 3}}.
    """
    chain = start_chain(
        profile,
        overrides_from(
            data_dir, warehouse, weather_source, api_url, train_until, validation_until,
            test_until, max_train_rows, tracking_uri, overrides,
        ),
    )  # fmt: skip
    records = ingest(chain)
    weather(chain)
    built = features(chain)
    report = train(chain, built.directory)
    return publish(chain, report, records.data_docs)


@flow(name="ingest")
def ingest_flow(profile: str | None = None, overrides: dict[str, Any] | None = None) -> Any:
    """Load the Himalayan Database records into the warehouse (clean tables + quarantine)."""
    return ingest(start_chain(profile, overrides or {}))


@flow(name="weather")
def weather_flow(profile: str | None = None, overrides: dict[str, Any] | None = None) -> Any:
    """Load daily weather for the attempts' windows into weather_daily."""
    return weather(start_chain(profile, overrides or {}))


@flow(name="features")
def features_flow(profile: str | None = None, overrides: dict[str, Any] | None = None) -> Any:
    """Build attempts, weather windows and model inputs from the warehouse."""
    return features(start_chain(profile, overrides or {}))


@flow(name="train")
def train_flow(
    profile: str | None = None,
    overrides: dict[str, Any] | None = None,
    features_dir: str | None = None,
) -> Any:
    """Train on a features folder (default: features.features_dir), log and register the model."""
    chain = start_chain(profile, overrides or {})
    return train(
        chain, Path(features_dir) if features_dir else chain.settings.features.features_dir
    )
