"""MLflow logging of a training run, and the champion gate both ways, on a temporary store."""

from __future__ import annotations

from pathlib import Path

import mlflow
import polars as pl
import pytest
import torch
from mlflow import MlflowClient
from sklearn.metrics import roc_auc_score
from training_fixtures import (
    TrainedRegistry,
    registry_settings,
    synthetic_features_dir,
    trained_registry_fixture,  # noqa: F401 (the fixture)
)

from model import DeepSummitTransformer
from pipeline.features.build import SNAPSHOT_FILE, load_features
from pipeline.train.artifact import (
    ModelFiles,
    model_input_frame,
    split_model_input,
    write_model_files,
)
from pipeline.train.registry import Candidate, decide, gate, log_and_register
from pipeline.train.trainer import predict_proba
from pipeline.warehouse import frame_digest


def broken_files(registry: TrainedRegistry, directory: Path) -> ModelFiles:
    """A model whose classifier is zeroed: it says 0.5 for everyone (test AUC exactly 0.5)."""
    trained, preprocessor = ModelFiles.in_directory(registry.model_dir).load()
    model = DeepSummitTransformer(trained.config)
    with torch.no_grad():
        model.head.classifier.weight.zero_()
        model.head.classifier.bias.zero_()
    return write_model_files(directory, model, preprocessor)


def register(registry: TrainedRegistry, settings, files: ModelFiles, features_dir: Path):
    """Log and register `files` in a run, scored on `features_dir`'s test split: a Candidate."""
    model, preprocessor = files.load()
    arrays, _ = load_features(features_dir)
    rows = pl.read_parquet(features_dir / SNAPSHOT_FILE).filter(pl.col("split") == "test")
    probabilities = predict_proba(model, arrays["test"])
    frame = model_input_frame(rows, arrays["test"], preprocessor)
    mlflow.set_tracking_uri(settings.mlflow.tracking_uri)
    mlflow.set_experiment(settings.mlflow.experiment)
    with mlflow.start_run():
        version = log_and_register(settings.mlflow, files, frame.head(2), probabilities[:2])
    return Candidate(
        version=str(version.version),
        test_auc=float(roc_auc_score(arrays["test"].label, probabilities)),
        test_digest=frame_digest(rows),
        weather_source=preprocessor.weather_source,
        test_frame=frame,
        test_labels=rows["label"].to_pandas(),
    )


def champion_version(settings) -> str:
    client = MlflowClient(settings.mlflow.tracking_uri)
    name, alias = settings.mlflow.registered_model, settings.mlflow.champion_alias
    return str(client.get_model_version_by_alias(name, alias).version)


def test_a_training_run_logs_params_metrics_dataset_plots_and_a_first_champion(
    trained_registry: TrainedRegistry,
) -> None:
    report, settings = trained_registry.report, trained_registry.settings
    client = MlflowClient(settings.mlflow.tracking_uri)
    run = client.get_run(report.mlflow_run_id)

    assert run.data.params["model.hidden_size"] == "16"
    assert run.data.params["profile"] == "tiny"
    for name in ("transformer", "logreg", "lightgbm"):
        for metric in ("auc", "accuracy", "brier", "ece", "log_loss"):
            assert f"{name}_test_{metric}" in run.data.metrics
    epochs = client.get_metric_history(run.info.run_id, "val_auc")
    assert [m.step for m in epochs] == [1, 2, 3]
    assert run.data.tags["prefect.flow_run_id"] == "flow-run-123"
    assert run.data.tags["data_digest"] == report.digest
    assert run.data.tags["weather_source"] == "archive"
    assert run.data.tags["git_commit"]

    (dataset_input,) = run.inputs.dataset_inputs
    assert str(trained_registry.features_dir / SNAPSHOT_FILE) in dataset_input.dataset.source
    assert dataset_input.dataset.digest
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "plots")}
    assert artifacts == {"plots/roc.png", "plots/calibration.png", "plots/learning_curve.png"}
    groups = mlflow.artifacts.load_dict(f"runs:/{run.info.run_id}/evaluation/auc_by_group.json")
    assert set(groups["peakid"]) == {"EVER", "CHOY", "AMAD", "MANA"}

    assert report.champion and report.model_version == "1"
    assert champion_version(settings) == "1"
    version = client.get_model_version(settings.mlflow.registered_model, "1")
    assert version.tags["champion_decision"] == "promoted"
    assert "first model" in version.description
    assert float(version.tags["test_auc"]) == report.scores[0].metrics.auc

    table = report.render()
    for name in ("transformer", "logistic regression", "LightGBM", "v1 (champion)"):
        assert name in table


def test_a_worse_model_stays_a_challenger(trained_registry: TrainedRegistry, tmp_path) -> None:
    settings = trained_registry.settings
    files = broken_files(trained_registry, tmp_path / "broken")
    candidate = register(trained_registry, settings, files, trained_registry.features_dir)
    assert candidate.test_auc == 0.5

    decision = gate(
        MlflowClient(settings.mlflow.tracking_uri), settings.mlflow, candidate, _no_load
    )

    assert not decision.promoted
    assert decision.previous_champion == "1"
    assert "does not beat champion v1" in decision.reason
    assert "recorded test AUC on the same test split" in decision.reason
    assert champion_version(settings) == "1"
    client = MlflowClient(settings.mlflow.tracking_uri)
    version = client.get_model_version(settings.mlflow.registered_model, candidate.version)
    assert version.tags["champion_decision"] == "challenger"
    assert version.tags["champion_reason"] == decision.reason
    assert version.description.startswith("challenger")


def test_a_better_model_becomes_champion(trained_registry: TrainedRegistry, tmp_path) -> None:
    settings = registry_settings(tmp_path)  # a fresh store: the broken model comes first
    client = MlflowClient(settings.mlflow.tracking_uri)
    broken = register(
        trained_registry,
        settings,
        broken_files(trained_registry, tmp_path / "broken"),
        trained_registry.features_dir,
    )
    assert gate(client, settings.mlflow, broken, _no_load).promoted  # the first model

    trained = ModelFiles.in_directory(trained_registry.model_dir)
    better = register(trained_registry, settings, trained, trained_registry.features_dir)
    decision = gate(client, settings.mlflow, better, _no_load)

    assert decision.promoted
    assert f"test AUC {better.test_auc:.4f} beats champion v{broken.version}" in decision.reason
    assert champion_version(settings) == better.version


def test_a_changed_test_split_rescores_the_champion_on_it(
    trained_registry: TrainedRegistry, tmp_path
) -> None:
    settings = trained_registry.settings
    other_split = synthetic_features_dir(tmp_path / "other", seed=5)
    files = broken_files(trained_registry, tmp_path / "broken")
    candidate = register(trained_registry, settings, files, other_split)

    decision = decide(
        MlflowClient(settings.mlflow.tracking_uri),
        settings.mlflow,
        candidate,
        mlflow.pyfunc.load_model,
    )

    assert "re-scored on this run's test split" in decision.reason
    assert not decision.promoted
    # The champion's own files (its weights and preprocessing), scored on the new split's raw
    # test rows outside the gate and the registry: the same AUC.
    champion, preprocessing = ModelFiles.in_directory(trained_registry.model_dir).load()
    inputs = preprocessing.transform(*split_model_input(candidate.test_frame))
    expected = roc_auc_score(candidate.test_labels, predict_proba(champion, inputs))
    assert decision.champion_auc == pytest.approx(expected, abs=1e-6)


def test_a_champion_on_another_weather_source_is_not_compared(
    trained_registry: TrainedRegistry,
) -> None:
    settings = trained_registry.settings
    candidate = Candidate("99", 0.99, "digest", "open-meteo", None, None)
    decision = decide(
        MlflowClient(settings.mlflow.tracking_uri), settings.mlflow, candidate, _no_load
    )
    assert not decision.promoted
    assert "weather source 'archive'" in decision.reason


def _no_load(uri: str):
    raise AssertionError(f"the gate should not need to load {uri} here")
