"""The `summit` flows, the chains of `deepsummit/flows/stages.py`: `summit` (deployed as
`summit/train`) and `outlook` (deployed as `summit/outlook`); and one flow per stage (what the
`deepsummit <stage>` commands run).

Flows only orchestrate: settings from the parameters, the stages in the declared order, each
waiting for the stages that write what it reads, and the lineage and summary artifacts.
"""

from __future__ import annotations

import json
import time
from typing import Any

from prefect import Flow, flow, get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.runtime import flow_run

from deepsummit.core.options import RunOptions
from deepsummit.flows.artifacts import (
    drift_markdown,
    lineage_markdown,
    markdown_with_charts,
    summary_markdown,
)
from deepsummit.flows.runner import Chain
from deepsummit.flows.stage_ends import StageEnd, made
from deepsummit.flows.stages import (
    BACKTEST_CHAIN,
    CHAIN,
    OUTLOOK_CHAIN,
    REPLAY_CHAIN,
    STAGES,
    TRAIN,
    Stage,
)
from deepsummit.flows.training import train_here, train_in_deployment, training_deployment

LINEAGE_ARTIFACT = "deepsummit-lineage"
SUMMARY_ARTIFACT = "deepsummit-run-summary"
DRIFT_ARTIFACT = "deepsummit-drift"
OUTLOOK_ARTIFACT = "deepsummit-outlook"
BACKTEST_ARTIFACT = "deepsummit-backtest"
SUMMARY_FILE = "summary.json"  # in the run folder: what `deepsummit main-job` prints


def start_chain(
    profile: str | None, options: RunOptions | None, overrides: dict[str, Any] | None
) -> Chain:
    return Chain.start(profile, (options or RunOptions()).overrides(overrides))


def publish(chain: Chain) -> dict[str, Any]:
    """The lineage and summary artifacts, and summary.json for `deepsummit main-job`."""
    report = chain.reports["train"]
    drift = chain.reports["drift"]
    name = str(flow_run.get_name() or "local")
    create_markdown_artifact(
        key=LINEAGE_ARTIFACT,
        markdown=lineage_markdown(chain.lineage, name),
        description="Assets of this run: key, rows, content digest, MLflow links",
    )
    create_markdown_artifact(
        key=SUMMARY_ARTIFACT,
        markdown=summary_markdown(report, drift),
        description="Test metrics against the baselines, the champion decision, input drift",
    )
    create_markdown_artifact(
        key=DRIFT_ARTIFACT,
        markdown=drift_markdown(drift),
        description="The newest season's inputs against the champion's training split",
    )
    summary = {
        "flow_run_id": str(flow_run.get_id() or ""),
        "run_dir": str(chain.run.run_dir),
        "model_version": str(report.model_version),
        "champion": report.champion,
        "model_version_url": report.model_url,
        "mlflow_run_url": report.run_url,
        "data_docs": str(chain.reports["ingest"].data_docs),
        "assets": [row.asset_key for row in chain.lineage],
    }
    (chain.run.run_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=2))
    return summary


@flow(name="summit", log_prints=True)
def summit(
    profile: str | None = None,
    options: RunOptions | None = None,
    overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Ingest → weather → features → train and register → drift; every stage cached on its
    inputs. Training runs as a child flow run of the deployment `train.deployment` where a
    worker of its pool is online, in this flow run otherwise.

    Args:
        profile: settings profile of deepsummit.toml (cpu, base, tiny); blank = the file's default.
        options: per-run options (data_dir, warehouse, weather_source, max_train_rows, …);
            blank = from config.
        overrides: any other settings, nested as in deepsummit.toml,
            e.g. {"train": {"max_epochs": 3}}.
    """
    chain = start_chain(profile, options, overrides)
    for stage in CHAIN:
        started = time.monotonic()
        if stage is TRAIN and (deployment := training_deployment(chain.settings)):
            train_in_deployment(chain, deployment)
        elif stage is TRAIN:
            train_here(chain)
        else:
            chain.run_stage(stage)
        log_stage_end(chain, stage, time.monotonic() - started)
    return publish(chain)


def log_stage_end(chain: Chain, stage: Stage, seconds: float) -> None:
    """One log line of the flow run as `stage` ends: what `deepsummit main-job` prints. Cached
    when every asset it produced this run was served from the cache."""
    states = {row.state for row in chain.lineage if row.stage == stage.name}
    state = "Cached" if states == {"Cached"} else "Completed"
    end = StageEnd(stage.name, state, seconds, made(stage.name, chain.reports.get(stage.name)))
    get_run_logger().info("%s", end.message())


@flow(name="summit", log_prints=True)
def outlook(
    profile: str | None = None,
    options: RunOptions | None = None,
    overrides: dict[str, Any] | None = None,
) -> Any:
    """Forecast → outlook: P(summit) per candidate push day for each member and the team, by
    the champion, from the newest Open-Meteo forecast of each peak. With `as_of` (options or
    the outlook section), a replay of that morning from the stored weather instead.

    Args:
        profile: settings profile of deepsummit.toml; blank = the file's default.
        options: per-run options (peak, first_day, days, team, forecast_url, …); blank = from
            config (the `outlook` section).
        overrides: any other settings, nested as in deepsummit.toml,
            e.g. {"outlook": {"agency": "Seven Summit Treks", "oxygen": true}}.
    """
    chain = start_chain(profile, options, overrides)
    replay = chain.settings.outlook.as_of is not None
    for stage in REPLAY_CHAIN if replay else OUTLOOK_CHAIN:
        chain.run_stage(stage)
    report = chain.reports["replay" if replay else "outlook"]
    create_markdown_artifact(
        key=OUTLOOK_ARTIFACT,
        markdown=report.markdown(),
        description="P(summit) per push day for each member and the team, with the chart",
    )
    create_markdown_artifact(
        key=LINEAGE_ARTIFACT,
        markdown=lineage_markdown(chain.lineage, str(flow_run.get_name() or "local")),
        description="Assets of this run: the forecast, the model version, the outlooks",
    )
    return report


@flow(name="summit", log_prints=True)
def backtest(
    profile: str | None = None,
    options: RunOptions | None = None,
    overrides: dict[str, Any] | None = None,
) -> Any:
    """The rolling-origin backtest of the newest features snapshot (deployed as
    `summit/backtest`): every fold cached, so a rerun on the same snapshot trains nothing and a
    run cut short resumes at the next fold.

    Args:
        profile: settings profile of deepsummit.toml; blank = the file's default.
        options: per-run options (snapshot, features_dir, tracking_uri, …); blank = from config.
        overrides: any other settings, nested as in deepsummit.toml,
            e.g. {"backtest": {"first_test_year": 2012}}.
    """
    chain = start_chain(profile, options, overrides)
    for stage in BACKTEST_CHAIN:
        chain.run_stage(stage)
    result = chain.reports["backtest"]
    create_markdown_artifact(
        key=BACKTEST_ARTIFACT,
        markdown=markdown_with_charts(result),
        description="Season by season and push day by push day, with intervals",
    )
    return result


def stage_flow(stage: Stage) -> Flow:
    """`stage` alone as a flow: what `deepsummit <stage>` runs; returns the stage's report."""

    @flow(name=stage.name, description=stage.description)
    def run_one(
        profile: str | None = None,
        options: RunOptions | None = None,
        overrides: dict[str, Any] | None = None,
    ) -> Any:
        return start_chain(profile, options, overrides).run_stage(stage)

    return run_one


STAGE_FLOWS: dict[str, Flow] = {name: stage_flow(stage) for name, stage in STAGES.items()}
