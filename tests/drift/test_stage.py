"""The drift stage: which season it compares, and what it says without a champion."""

from __future__ import annotations

import json

import polars as pl
from mlflow import MlflowClient
from training_fixtures import trained_registry_fixture  # noqa: F401 (the fixture)

from deepsummit.contracts.snapshot import read_features
from deepsummit.core.context import RunContext
from deepsummit.drift.stage import check_drift, newest_season

pytest_plugins = ["features_fixtures"]


def test_the_newest_season_is_winter_after_autumn_of_the_same_year() -> None:
    frame = pl.DataFrame(
        {
            "year": [2019, 2019, 2018, 2019, 2019],
            "season": ["Autumn", "Winter", "Winter", "Spring", "Winter"],
        }
    )
    rows, name = newest_season(frame)
    assert name == "Winter 2019" and rows.height == 2


def test_the_newest_season_is_compared_with_the_champion_and_logged(
    trained_registry, tmp_path
) -> None:
    settings = trained_registry.settings.model_copy(deep=True)
    settings.paths.var_dir = tmp_path
    check = check_drift(settings, RunContext(tmp_path / "run"), trained_registry.snapshot)
    version = trained_registry.report.model_version
    assert check.note == f"champion v{version}"
    _, season = newest_season(read_features(trained_registry.snapshot))  # "Summer 2025"
    assert check.report is not None and f"the newest season ({season}" in check.report.current
    # Compared with the training rows of that season's weeks, and the report says so.
    weeks = f"the same season and push weeks ({season.split()[0]} weeks"
    assert weeks in check.report.reference and weeks in check.render()
    assert check.path == tmp_path / "drift" / f"{trained_registry.snapshot.name}-v{version}.json"
    assert json.loads(check.path.read_text()) == check.report.as_dict()
    client = MlflowClient(settings.mlflow.tracking_uri)
    experiment = client.get_experiment_by_name(settings.mlflow.experiment)
    [logged] = client.search_runs(
        [experiment.experiment_id], f"tags.compared_with_version = '{version}'"
    )
    assert logged.data.tags["kind"] == "input drift"
    assert logged.data.metrics["drifted_features"] == len(check.report.drifted)


def test_without_a_champion_it_says_it_did_not_compare(trained_registry, tmp_path) -> None:
    settings = trained_registry.settings.model_copy(deep=True)
    settings.paths.var_dir = tmp_path
    settings.mlflow.tracking_uri = f"sqlite:///{tmp_path / 'empty.db'}"
    check = check_drift(settings, RunContext(tmp_path / "run"), trained_registry.snapshot)
    assert check.report is None and check.path is None
    assert check.render() == (
        "input drift: not compared (no champion with a drift reference in the registry)"
    )
    assert not (tmp_path / "drift").exists()
