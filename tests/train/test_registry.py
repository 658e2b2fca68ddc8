"""MLflow logging of a training run, the champion gate (beyond noise only, on the same test
rows, never a model reading post-climb inputs), and the digest check before a version loads."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import mlflow
import numpy as np
import polars as pl
import pytest
import torch
from mlflow import MlflowClient
from sklearn.metrics import roc_auc_score
from training_fixtures import (
    TrainedRegistry,
    registry_settings,
    trained_registry_fixture,  # noqa: F401 (the fixture)
)

from deepsummit.contracts.artifact import ModelArtifact
from deepsummit.contracts.champion import TAG_KNOWN_BY, ModelFilesChanged, load_verified
from deepsummit.contracts.snapshot import PLANNED_TEST_FILE
from deepsummit.core.inputs import Known
from deepsummit.core.planned import KEY_COLUMNS
from deepsummit.train.registry import Candidate, decide, gate, log_and_register

pytest_plugins = ["features_fixtures"]


def champion_version(settings) -> str:
    client = MlflowClient(settings.mlflow.tracking_uri)
    name, alias = settings.mlflow.registered_model, settings.mlflow.champion_alias
    return str(client.get_model_version_by_alias(name, alias).version)


def candidate_of(registry: TrainedRegistry, version: str, probability: np.ndarray) -> Candidate:
    """A registered version's facts for the gate, scored `probability` on the test rows."""
    test_input = pl.read_parquet(registry.snapshot / PLANNED_TEST_FILE)
    keys = test_input.select(KEY_COLUMNS)
    labels = pl.read_parquet(registry.snapshot / "features.parquet").select(*KEY_COLUMNS, "label")
    predictions = keys.join(labels, on=list(KEY_COLUMNS), maintain_order="left").with_columns(
        probability=pl.Series(probability)
    )
    return Candidate(
        version=version,
        test_digest=registry.report.test_digest,
        weather_source=registry.report.weather_source,
        inputs_known_by=Known.AT_PUSH,
        predictions=predictions,
        test_input=test_input,
    )


def champion_predictions(registry: TrainedRegistry) -> np.ndarray:
    """The champion's own calibrated test probabilities, in planned_test order."""
    model = load_verified(registry.settings.mlflow.tracking_uri, "deepsummit", "1")
    test_input = pl.read_parquet(registry.snapshot / PLANNED_TEST_FILE)
    return model.predict(test_input.drop(KEY_COLUMNS).to_pandas())["probability"].to_numpy(
        dtype=float
    )


def register_constant(registry: TrainedRegistry, settings, tmp_path: Path) -> str:
    """Register the champion's artifact with every network's classifier zeroed: it says the
    same probability for everyone (test AUC 0.5)."""
    artifact = ModelArtifact.load(registry.model_dir)
    for network in artifact.networks:
        with torch.no_grad():
            network.head.classifier.weight.zero_()
            network.head.classifier.bias.zero_()
    directory = artifact.save(tmp_path / "constant")
    example = pl.read_parquet(registry.snapshot / PLANNED_TEST_FILE).head(2).drop(KEY_COLUMNS)
    mlflow.set_tracking_uri(settings.mlflow.tracking_uri)
    mlflow.set_experiment(settings.mlflow.experiment)
    with mlflow.start_run():
        version = log_and_register(settings.mlflow, directory, example.to_pandas(), artifact)
    return str(version.version)


def test_a_training_run_logs_params_metrics_intervals_dataset_plots_and_a_first_champion(
    trained_registry: TrainedRegistry,
) -> None:
    report, settings = trained_registry.report, trained_registry.settings
    client = MlflowClient(settings.mlflow.tracking_uri)
    run = client.get_run(report.mlflow_run_id)

    assert run.data.params["model.hidden_size"] == "16"
    assert run.data.params["profile"] == "tiny"
    assert run.data.params["inputs"] == ",".join(report.inputs)
    for name in ("transformer", "logreg", "lightgbm"):
        for metric in ("auc", "brier", "ece"):
            low, value, high = (
                run.data.metrics[f"{name}_test_{metric}{end}"]
                for end in ("_ci_low", "", "_ci_high")
            )
            assert low <= value <= high
        assert f"{name}_test_ece_uncalibrated" in run.data.metrics
    assert "auc_difference_lightgbm_ci_low" in run.data.metrics
    seeds = (settings.train.seed, settings.train.seed + 1, settings.train.seed + 2)
    for seed in seeds:
        epochs = client.get_metric_history(run.info.run_id, f"seed_{seed}_val_auc")
        assert [m.step for m in epochs] == [1, 2, 3]
    assert report.seeds == seeds
    assert 0.0 <= run.data.metrics["transformer_test_seed_spread"] < 1.0
    assert run.data.tags["prefect.flow_run_id"] == "flow-run-123"
    assert run.data.tags["inputs_known_by"] == Known.AT_PUSH.value
    (dataset_input,) = run.inputs.dataset_inputs
    assert str(trained_registry.snapshot) in dataset_input.dataset.source
    plots = {a.path for a in client.list_artifacts(run.info.run_id, "plots")}
    assert plots == {
        "plots/roc.png",
        "plots/calibration.png",
        "plots/calibration_before.png",
        "plots/learning_curve.png",
    }
    assert report.champion and report.model_version == "1"
    assert champion_version(settings) == "1"
    version = client.get_model_version(settings.mlflow.registered_model, "1")
    assert version.tags["champion_decision"] == "promoted"
    assert version.tags[TAG_KNOWN_BY] == Known.AT_PUSH.value
    assert "first model" in version.description
    table = report.render()
    for name in ("transformer", "logistic regression", "LightGBM", "v1 (champion)", "± "):
        assert name in table


def test_the_registered_model_gives_the_run_s_own_test_probabilities(
    trained_registry: TrainedRegistry,
) -> None:
    """The champion as a client loads it, on the planned test rows, against the run's stored
    predictions: the same numbers (and the same AUC the run reported)."""
    settings = trained_registry.settings
    run_id = trained_registry.report.mlflow_run_id
    stored = pl.read_parquet(
        mlflow.artifacts.download_artifacts(
            run_id=run_id, artifact_path="evaluation/test_predictions.parquet"
        )
    )
    served = champion_predictions(trained_registry)
    np.testing.assert_allclose(served, stored["probability"].to_numpy(), atol=1e-6)
    auc = roc_auc_score(stored["label"], served)
    reported = MlflowClient(settings.mlflow.tracking_uri).get_run(run_id).data.metrics
    assert auc == pytest.approx(reported["transformer_test_auc"], abs=1e-6)


def test_the_gate_refuses_a_challenger_whose_advantage_is_within_noise(
    trained_registry: TrainedRegistry,
) -> None:
    settings = trained_registry.settings
    client = MlflowClient(settings.mlflow.tracking_uri)
    champion = champion_predictions(trained_registry)
    # Retrained on unchanged data: the same predictions never move the alias.
    same = decide(client, settings.mlflow, candidate_of(trained_registry, "99", champion))
    assert not same.promoted
    assert (same.difference.estimate, same.difference.low, same.difference.high) == (0, 0, 0)
    # A challenger that differs by noise (small beside the spread of the champion's answers):
    # its interval spans 0, so no.
    rng = np.random.default_rng(0)
    noisy = np.clip(champion + rng.normal(0, 0.05 * champion.std(), champion.size), 0, 1)
    decision = decide(client, settings.mlflow, candidate_of(trained_registry, "99", noisy))
    assert decision.difference.low < 0 < decision.difference.high
    assert not decision.promoted
    assert "does not beat it beyond noise" in decision.reason


def test_a_worse_model_stays_a_challenger_and_a_better_one_becomes_champion(
    trained_registry: TrainedRegistry, tmp_path: Path
) -> None:
    settings = registry_settings(tmp_path / "store", trained_registry.settings)
    client = MlflowClient(settings.mlflow.tracking_uri)
    constant = register_constant(trained_registry, settings, tmp_path)
    flat = np.full(len(champion_predictions(trained_registry)), 0.5)
    first = gate(client, settings.mlflow, candidate_of(trained_registry, constant, flat))
    assert first.promoted and "no champion yet" in first.reason  # an empty store

    # The gate reads a version's test predictions: a second version whose predictions follow
    # the outcome (noisily) clearly beats the constant one.
    better = register_constant(trained_registry, settings, tmp_path / "again")
    labels = candidate_of(trained_registry, better, flat).predictions["label"].to_numpy()
    noise = np.random.default_rng(1).normal(0, 0.3, flat.size)
    ranked = np.clip(0.5 + 0.2 * (labels - 0.5) + noise, 0, 1)
    decision = gate(client, settings.mlflow, candidate_of(trained_registry, better, ranked))
    assert decision.promoted and decision.difference.low > 0
    assert champion_version(settings) == better
    tags = client.get_model_version(settings.mlflow.registered_model, better).tags
    assert float(tags["auc_difference_ci_low"]) == pytest.approx(decision.difference.low)
    assert tags["compared_with"] == constant

    worse = gate(client, settings.mlflow, candidate_of(trained_registry, constant, flat))
    assert not worse.promoted and worse.difference.high < 0
    assert champion_version(settings) == better


def test_a_changed_test_split_rescores_the_champion_on_it(
    trained_registry: TrainedRegistry,
) -> None:
    settings = trained_registry.settings
    champion = champion_predictions(trained_registry)
    candidate = dataclasses.replace(
        candidate_of(trained_registry, "99", champion), test_digest="another split"
    )
    decision = decide(MlflowClient(settings.mlflow.tracking_uri), settings.mlflow, candidate)
    assert "re-scored on this run's test split" in decision.reason
    assert decision.difference.estimate == pytest.approx(0.0, abs=1e-9)


def test_inputs_known_after_the_climb_never_make_a_champion(
    trained_registry: TrainedRegistry,
) -> None:
    settings = trained_registry.settings
    client = MlflowClient(settings.mlflow.tracking_uri)
    candidate = dataclasses.replace(
        candidate_of(trained_registry, "99", champion_predictions(trained_registry)),
        inputs_known_by=Known.AFTER_CLIMB,
    )
    decision = decide(client, settings.mlflow, candidate)
    assert not decision.promoted and "known only after the climb" in decision.reason


def test_a_champion_on_another_weather_source_is_not_compared(
    trained_registry: TrainedRegistry,
) -> None:
    settings = trained_registry.settings
    candidate = dataclasses.replace(
        candidate_of(trained_registry, "99", champion_predictions(trained_registry)),
        weather_source="open-meteo",
    )
    decision = decide(MlflowClient(settings.mlflow.tracking_uri), settings.mlflow, candidate)
    assert not decision.promoted
    assert "weather source 'archive'" in decision.reason


def test_a_version_whose_files_changed_is_never_loaded(
    trained_registry: TrainedRegistry, tmp_path: Path
) -> None:
    settings = registry_settings(tmp_path / "store", trained_registry.settings)
    version = register_constant(trained_registry, settings, tmp_path)
    load_verified(settings.mlflow.tracking_uri, "deepsummit", version)  # untouched: loads
    stored = next((tmp_path / "store" / "artifacts").rglob("calibration.json"))
    stored.write_text(stored.read_text().replace('"method"', '"method" ', 1))
    with pytest.raises(ModelFilesChanged, match=f"deepsummit v{version}: its files"):
        load_verified(settings.mlflow.tracking_uri, "deepsummit", version)
