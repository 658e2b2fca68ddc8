"""The train stage's report as the chain shows it: data that survives JSON as it was, and a model
spec that tells trainings of another model apart but not the same one on another machine."""

from __future__ import annotations

from training_fixtures import TrainedRegistry

from deepsummit.contracts.training_report import Build, LineageRow, TrainingReport, model_spec
from deepsummit.core.config import load_settings

pytest_plugins = ["features_fixtures", "training_fixtures"]


def test_a_trained_report_goes_through_json_as_it_was(trained_registry: TrainedRegistry) -> None:
    trained = trained_registry.report
    build = Build.of(trained_registry.settings)
    rows = [LineageRow("train", "mlflow://deepsummit/1", 2000, "ab12", "Completed")]

    handed = trained.handed(build, rows)
    back = TrainingReport.from_json(handed.to_json(), "memory")

    assert back == handed and back.build == build and back.lineage == tuple(rows)
    assert back.test_auc == trained.comparison.rows[0].calibrated.auc.estimate
    assert back.judged_line == trained.judged_line()
    assert back.tables_markdown in trained.render()


def test_the_model_spec_follows_what_is_learnt_not_where_it_runs() -> None:
    tiny = model_spec(load_settings("tiny"))
    elsewhere = {
        "train": {"device": "auto", "cpu_fallback": True, "num_threads": 3, "checkpoint_dir": "/x"}
    }
    assert model_spec(load_settings("tiny", elsewhere)) == tiny
    assert model_spec(load_settings("tiny", {"model": {"hidden_size": 32}})) != tiny
    assert model_spec(load_settings("tiny", {"train": {"learning_rate": 0.5}})) != tiny
    assert model_spec(load_settings("cpu")) != tiny
