"""The drift stage: the newest season against the champion, and what it says without one."""

from __future__ import annotations

import json

from mlflow import MlflowClient

from deepsummit.contracts.snapshot import read_features
from deepsummit.core.context import RunContext
from deepsummit.core.seasons import newest_season_rows
from deepsummit.drift.stage import check_drift

pytest_plugins = ["features_fixtures", "training_fixtures"]


def test_the_newest_season_is_compared_with_the_champion_and_logged(
    trained_registry, tmp_path
) -> None:
    settings = trained_registry.settings.model_copy(deep=True)
    settings.paths.var_dir = tmp_path
    check = check_drift(settings, RunContext(tmp_path / "run"), trained_registry.snapshot)
    version = trained_registry.report.model_version
    assert check.note == f"champion v{version}"
    _, season = newest_season_rows(read_features(trained_registry.snapshot))  # "2025 Summer"
    assert check.report is not None and f"the newest season ({season}" in check.report.current
    # Compared with the training rows of that season's weeks, and the report says so.
    weeks = f"the same season and push weeks ({season.split()[1]} weeks"
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
