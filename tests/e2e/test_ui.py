"""The lineage and the model are readable in the real Prefect and MLflow UIs (headless Chromium).

A small flow named like ours runs against a throwaway Prefect server: stages that materialise
assets with upstream assets and metadata, an MLflow run with metrics and plots whose model version
becomes @champion, and a lineage artifact. The checks read what the pages render, with the same
functions the end-to-end test of the real `summit/train` run uses.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
from e2e.ui_checks import check_mlflow_model, check_mlflow_run, check_prefect_flow_run
from e2e.ui_fixtures import browser, mlflow_server, prefect_server  # noqa: F401 (fixtures)
from mlflow import MlflowClient
from prefect import flow, task
from prefect.artifacts import create_markdown_artifact
from prefect.assets import Asset, AssetProperties, add_asset_metadata, materialize
from prefect.settings import PREFECT_API_URL, temporary_settings

MODEL = "deepsummit"
METRICS = ("test_auc", "test_brier", "val_auc")
PLOTS = ("plots/roc.png", "plots/calibration.png")


@dataclass(frozen=True)
class DemoRun:
    flow_run_id: str
    mlflow_run_id: str
    version: str
    lineage: dict[str, list[str]]  # asset key → upstream asset keys
    digests: dict[str, str]


def _asset(key: str, name: str) -> Asset:
    return Asset(key=key, properties=AssetProperties(name=name, description=f"demo {name}"))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def run_demo(prefect_url: str, mlflow_url: str, root: Path) -> DemoRun:
    """One `summit` flow run shaped like the real chain; returns what the UIs should show."""
    warehouse, features_dir = root / "warehouse.duckdb", root / "features"
    sources = [_asset(f"file://{root}/data/{n}.csv", f"{n}.csv") for n in ("members", "peaks")]
    archive = _asset(f"file://{root}/data/weather_archive.csv.gz", "weather archive")
    members = _asset(f"duckdb://{warehouse}/members", "members")
    weather = _asset(f"duckdb://{warehouse}/weather_daily", "weather_daily")
    features = _asset(f"file://{features_dir}/features.parquet", "features")
    mlflow_host = mlflow_url.split("://", 1)[1]
    digests: dict[str, str] = {}
    lineage: dict[str, list[str]] = {}

    def stage(name: str, asset: Asset, upstream: list[Asset], rows: int):
        lineage[asset.key] = [a.key for a in upstream]

        def body() -> int:
            digests[asset.key] = _digest(asset.key)
            add_asset_metadata(asset, {"rows": rows, "digest": digests[asset.key]})
            return rows

        return materialize(asset, asset_deps=upstream, name=name)(body)

    ingest = stage("ingest", members, sources, 120)
    load_weather = stage("weather", weather, [archive, members], 900)
    build_features = stage("features", features, [members, weather], 110)

    @task(name="train")
    def train() -> tuple[str, str]:
        client = MlflowClient(tracking_uri=mlflow_url)
        experiment = client.get_experiment_by_name(MODEL)
        experiment_id = experiment.experiment_id if experiment else client.create_experiment(MODEL)
        run_id = client.create_run(experiment_id, run_name="summit-demo").info.run_id
        for epoch, auc in enumerate((0.61, 0.66, 0.69)):
            client.log_metric(run_id, "val_auc", auc, step=epoch)
        client.log_metric(run_id, "test_auc", 0.71)
        client.log_metric(run_id, "test_brier", 0.19)
        for plot in PLOTS:
            figure, axes = plt.subplots(figsize=(3, 3))
            axes.plot([0, 1], [0, 1])
            axes.set_title(Path(plot).stem)
            client.log_figure(run_id, figure, plot)
            plt.close(figure)
        client.set_terminated(run_id)
        if not client.search_registered_models(f"name = '{MODEL}'"):
            client.create_registered_model(MODEL)
        source = f"{client.get_run(run_id).info.artifact_uri}/model"
        version = client.create_model_version(MODEL, source=source, run_id=run_id).version
        client.set_registered_model_alias(MODEL, "champion", version)
        return run_id, str(version)

    @flow(name="summit")
    def summit() -> tuple[str, str]:
        ingest()
        load_weather()
        build_features()
        run_id, version = train()
        model = _asset(f"mlflow://{mlflow_host}/models/{MODEL}/{version}", f"{MODEL} v{version}")
        stage("register", model, [features], 110)()
        rows = "\n".join(f"| {key} | {digests[key]} |" for key in lineage)
        create_markdown_artifact(
            key="lineage",
            markdown="| asset | digest |\n| --- | --- |\n"
            + rows
            + f"\n\n[MLflow run]({mlflow_url}/#/runs/{run_id}) · "
            + f"[model version]({mlflow_url}/#/models/{MODEL}/versions/{version})",
        )
        return run_id, version

    with temporary_settings({PREFECT_API_URL: f"{prefect_url}/api"}):
        state = summit(return_state=True)
        run_id, version = state.result()
    return DemoRun(str(state.state_details.flow_run_id), run_id, version, lineage, digests)


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_lineage_and_model_in_the_uis(prefect_server, mlflow_server, browser, tmp_path):  # noqa: F811
    demo = run_demo(prefect_server.url, mlflow_server.url, tmp_path)
    events = check_prefect_flow_run(
        browser,
        prefect_server.url,
        demo.flow_run_id,
        expected_stages=["ingest", "weather", "features", "train", "register"],
        expected_assets=demo.lineage,
        expected_artifacts={"lineage": list(demo.digests.values())},
        expected_links={"lineage": [f"{mlflow_server.url}/#/runs/{demo.mlflow_run_id}"]},
    )
    assert {key: event["payload"]["digest"] for key, event in events.items()} == demo.digests

    run_id = check_mlflow_model(browser, mlflow_server.url, MODEL, demo.version)
    assert run_id == demo.mlflow_run_id
    shown = check_mlflow_run(browser, mlflow_server.url, run_id, METRICS, PLOTS)
    assert shown == {"test_auc": 0.71, "test_brier": 0.19, "val_auc": 0.69}
