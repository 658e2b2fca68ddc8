"""The stage commands: each runs one stage as its Prefect flow and prints its report."""

from __future__ import annotations

import typer

from deepsummit.cli.common import (
    AllowShrink,
    ApiUrl,
    Archive,
    DataDir,
    Expeditions,
    FeaturesDir,
    HdbExpeditions,
    HdbMembers,
    MaxEpochs,
    MaxTrainRows,
    Members,
    Peaks,
    Profile,
    Snapshot,
    TestUntil,
    TrackingUri,
    TrainUntil,
    ValidationUntil,
    Warehouse,
    WeatherSource,
    command,
    require_tracking,
    run_flow,
    run_options,
    settings_for,
    use_prefect,
)
from deepsummit.core.options import RunOptions


def _stage(name: str, profile: str | None, options: RunOptions) -> None:
    """Run one stage's flow locally and print its report."""
    settings = settings_for(profile, options)
    if name == "train":
        require_tracking(settings.mlflow)
    use_prefect(settings)
    from deepsummit.flows.summit import STAGE_FLOWS

    typer.echo(run_flow(STAGE_FLOWS[name], profile, options).render())


@command()
def ingest(
    profile: Profile = None,
    data_dir: DataDir = None,
    warehouse: Warehouse = None,
    members: Members = None,
    expeditions: Expeditions = None,
    peaks: Peaks = None,
    hdb_members: HdbMembers = None,
    hdb_expeditions: HdbExpeditions = None,
    allow_shrink: AllowShrink = None,
) -> None:
    """Load the Himalayan Database records: raw tables, clean tables, quarantine, Data Docs."""
    _stage("ingest", profile, run_options(locals()))


@command()
def weather(
    profile: Profile = None,
    data_dir: DataDir = None,
    warehouse: Warehouse = None,
    weather_source: WeatherSource = None,
    api_url: ApiUrl = None,
    archive: Archive = None,
) -> None:
    """Store the daily weather the attempts' 90-day windows need in weather_daily."""
    _stage("weather", profile, run_options(locals()))


@command()
def features(
    profile: Profile = None,
    warehouse: Warehouse = None,
    features_dir: FeaturesDir = None,
    train_until: TrainUntil = None,
    validation_until: ValidationUntil = None,
    test_until: TestUntil = None,
) -> None:
    """Build attempts, weather windows and the model inputs (a features snapshot)."""
    _stage("features", profile, run_options(locals()))


@command()
def train(
    profile: Profile = None,
    snapshot: Snapshot = None,
    features_dir: FeaturesDir = None,
    tracking_uri: TrackingUri = None,
    max_train_rows: MaxTrainRows = None,
    max_epochs: MaxEpochs = None,
) -> None:
    """Train the transformer and the baselines, log to MLflow, register, gate the champion."""
    _stage("train", profile, run_options(locals()))


@command()
def drift(
    profile: Profile = None,
    snapshot: Snapshot = None,
    features_dir: FeaturesDir = None,
    tracking_uri: TrackingUri = None,
) -> None:
    """Compare the newest season's inputs with the champion's training rows of the same weeks."""
    _stage("drift", profile, run_options(locals()))


@command()
def backtest(
    profile: Profile = None,
    snapshot: Snapshot = None,
    features_dir: FeaturesDir = None,
    tracking_uri: TrackingUri = None,
) -> None:
    """Backtest the newest features snapshot season by season and push day by push day (each
    fold cached: a rerun trains nothing, a run cut short resumes)."""
    _stage("backtest", profile, run_options(locals()))
