"""MLflow logging of a training run, the refit it registers, the champion gate (recipes compared
beyond noise only, on the rows both held out, by AUC and by member group, never a model reading
post-climb inputs), and the digest check before a version loads."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import polars as pl
import pytest
import torch
from mlflow import MlflowClient
from sklearn.metrics import roc_auc_score
from training_fixtures import (
    TrainedRegistry,
    registry_settings,
)

from deepsummit.contracts.artifact import ARTIFACT_NAME, ModelArtifact
from deepsummit.contracts.blend import mix
from deepsummit.contracts.champion import (
    TAG_KNOWN_BY,
    TAG_TRAINED_THROUGH,
    ModelFilesChanged,
    load_verified,
)
from deepsummit.contracts.snapshot import PLANNED_TEST_FILE
from deepsummit.core.inputs import Known
from deepsummit.core.planned import KEY_COLUMNS
from deepsummit.serve.inference import ensemble_logit, member_logits
from deepsummit.train.evaluation import SERVED_BLEND
from deepsummit.train.parallel import refit_beside
from deepsummit.train.recipe import Recipe, preprocessing_for, refit
from deepsummit.train.registration import Registered, TrainedModel, log_and_register
from deepsummit.train.registry import (
    MEMBER_PREDICTIONS_ARTIFACT,
    PREDICTIONS_ARTIFACT,
    Candidate,
    decide,
    gate,
)
from deepsummit.train.stage import TrainingData

pytest_plugins = ["features_fixtures", "training_fixtures"]


def champion_version(settings) -> str:
    client = MlflowClient(settings.mlflow.tracking_uri)
    name, alias = settings.mlflow.registered_model, settings.mlflow.champion_alias
    return str(client.get_model_version_by_alias(name, alias).version)


# A version only `decide` sees (the gate would load it first): nothing trained to check it with.
DECIDED_ONLY = Registered("99", TrainedModel("", pd.DataFrame(), np.empty(0)))


def candidate_of(
    registry: TrainedRegistry,
    registered: Registered,
    probability: np.ndarray,
    member_probability: np.ndarray | None = None,
) -> Candidate:
    """A registered version's facts for the gate, its evaluation scored `probability` on the
    held-out test rows and `member_probability` on the member check's (default: the
    champion's answers there)."""
    keys = pl.read_parquet(registry.snapshot / PLANNED_TEST_FILE).select(KEY_COLUMNS)
    labels = pl.read_parquet(registry.snapshot / "features.parquet").select(*KEY_COLUMNS, "label")
    predictions = keys.join(labels, on=list(KEY_COLUMNS), maintain_order="left").with_columns(
        probability=pl.Series(probability)
    )
    members = champion_answers(registry, MEMBER_PREDICTIONS_ARTIFACT)
    if member_probability is not None:
        members = members.with_columns(probability=pl.Series(member_probability))
    return Candidate(
        version=registered.version,
        test_digest=registry.report.test_digest,
        weather_source=registry.report.weather_source,
        inputs_known_by=Known.AT_PUSH,
        predictions=predictions,
        member_predictions=members,
        trained_through=registry.report.trained_through,
        trained=registered.trained,
    )


def champion_answers(registry: TrainedRegistry, artifact: str) -> pl.DataFrame:
    """The champion's evaluation's answers on held-out rows, as its run keeps them."""
    stored = mlflow.artifacts.download_artifacts(
        run_id=registry.report.mlflow_run_id,
        artifact_path=artifact,
        tracking_uri=registry.settings.mlflow.tracking_uri,
    )
    return pl.read_parquet(stored)


def champion_predictions(registry: TrainedRegistry) -> np.ndarray:
    """The champion's answers on the held-out test rows (planned_test order)."""
    return champion_answers(registry, PREDICTIONS_ARTIFACT)["probability"].to_numpy()


def register_constant(registry: TrainedRegistry, settings, tmp_path: Path) -> Registered:
    """Register the champion's artifact with every network's classifier zeroed: it says the
    same probability for everyone (test AUC 0.5)."""
    artifact = ModelArtifact.load(registry.model_dir)
    for network in artifact.networks:
        with torch.no_grad():
            network.head.classifier.weight.zero_()
            network.head.classifier.bias.zero_()
    directory = artifact.save(tmp_path / "constant" / ARTIFACT_NAME)
    example = pl.read_parquet(registry.snapshot / PLANNED_TEST_FILE).head(2).drop(KEY_COLUMNS)
    mlflow.set_tracking_uri(settings.mlflow.tracking_uri)
    mlflow.set_experiment(settings.mlflow.experiment)
    with mlflow.start_run():
        return log_and_register(settings.mlflow, directory, example.to_pandas(), artifact)


def test_a_training_run_logs_params_metrics_intervals_dataset_plots_and_a_first_champion(
    trained_registry: TrainedRegistry,
) -> None:
    report, settings = trained_registry.report, trained_registry.settings
    client = MlflowClient(settings.mlflow.tracking_uri)
    run = client.get_run(report.mlflow_run_id)

    assert run.data.params["model.hidden_size"] == "16"
    assert run.data.params["profile"] == "tiny"
    assert run.data.params["inputs"] == ",".join(report.inputs)
    for name in ("transformer", "logreg", "lightgbm", "catboost"):
        for metric in ("auc", "brier", "ece"):
            low, value, high = (
                run.data.metrics[f"{name}_test_{metric}{end}"]
                for end in ("_ci_low", "", "_ci_high")
            )
            assert low <= value <= high
        assert f"{name}_test_ece_uncalibrated" in run.data.metrics
    assert "auc_difference_lightgbm_ci_low" in run.data.metrics
    # The served blend is judged first, beside each of its parts (tests/training_fixtures.py).
    assert report.comparison.rows[0].name == SERVED_BLEND
    assert "auc_difference_transformer" in run.data.metrics
    assert 0 <= run.data.metrics["served_transformer_weight"] < 1
    seeds = tuple(range(settings.train.seed, settings.train.seed + settings.train.seeds))
    assert len(seeds) >= 2  # an ensemble
    for seed in seeds:
        # The member check is validated on its years; early stopping may end it sooner.
        judged = client.get_metric_history(run.info.run_id, f"member_check_seed_{seed}_val_auc")
        assert [m.step for m in judged] == list(range(1, len(judged) + 1)) and judged
        # The other two trainings run the epochs the check kept, nothing held out to judge by.
        best = int(run.data.metrics[f"member_check_seed_{seed}_best_epoch"])
        for prefix in ("", "refit_"):
            trained = client.get_metric_history(run.info.run_id, f"{prefix}seed_{seed}_train_loss")
            assert [m.step for m in trained] == list(range(1, best + 1))
    assert report.seeds == seeds
    low, value, high = (
        run.data.metrics[f"member_check_transformer_group_error{end}"]
        for end in ("_ci_low", "", "_ci_high")
    )
    assert 0 <= low <= value <= high
    assert run.data.metrics["member_check_rows"] == report.rows["member check"] > 0
    # The registered model learnt every season through the newest; the run says which.
    assert report.trained_through == run.data.params["trained_through"] == "2025 Summer"
    assert 0.0 <= run.data.metrics["transformer_test_seed_spread"] < 1.0
    # The test split's expedition records are judged by expedition, every model on their rows.
    table = report.evaluation.expeditions
    assert table is not None and set(table.models) == set(report.comparison.calibrators)
    assert {season.season[:4] for season in table.seasons} == {"2023", "2024", "2025"}
    assert table.scored_seasons >= 1
    low, value, high = (
        run.data.metrics[f"test_expeditions_transformer_within_season_auc{end}"]
        for end in ("_ci_low", "", "_ci_high")
    )
    assert low <= value <= high
    evaluation = {a.path for a in client.list_artifacts(run.info.run_id, "evaluation")}
    assert {"evaluation/expeditions.md", "evaluation/member_groups.md"} <= evaluation
    assert {PREDICTIONS_ARTIFACT, MEMBER_PREDICTIONS_ARTIFACT} <= evaluation
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
    for name in (
        "transformer", "LightGBM", "CatBoost", "v1 (champion, answered by transformer 0.",
        "through 2025 Summer", "group error", "60 and over",
    ):  # fmt: skip
        assert name in table
    assert version.tags[TAG_TRAINED_THROUGH] == "2025 Summer"


def test_the_registered_model_is_the_refit_and_serves_what_its_networks_say(
    trained_registry: TrainedRegistry,
) -> None:
    """The registered artifact is the refit on every season (its preprocessing fitted on them),
    and the pyfunc a client loads gives, on the planned test rows, what its networks give on
    those rows' arrays: serving computes the features as training did. The run's stored
    test predictions are the evaluation's, held out, and give the AUC the run reported."""
    settings = trained_registry.settings
    artifact = ModelArtifact.load(trained_registry.model_dir)
    assert artifact.metadata["trained_through"] == "2025 Summer"
    assert artifact.preprocessor.extra["trained_on"] == "every season through 2025 Summer"
    # The map was fitted on the member check, and the artifact keeps how it judged each group.
    assert artifact.calibrator.method == trained_registry.settings.train.calibration
    assert tuple(artifact.calibrator.group_shifts) == settings.train.calibration_shifts_by
    assert artifact.member_groups is not None and artifact.member_groups["rows"]
    features = pl.read_parquet(trained_registry.snapshot / "features.parquet")
    test = features.filter(pl.col("split") == "test")
    windows = pl.read_parquet(trained_registry.snapshot / "windows.parquet")
    arrays = artifact.preprocessor.transform(test, windows)
    transformer = artifact.calibrator.probabilities(
        ensemble_logit(member_logits(artifact.networks, arrays.model_inputs())), test
    )
    # The registry's versions serve a blend (tests/training_fixtures.py): its tree answers too.
    blend = artifact.blend
    assert blend is not None and artifact.parts == trained_registry.report.evaluation.served_parts
    expected = mix(transformer, blend.tree_answers(arrays, test), blend.weight)
    model = load_verified(settings.mlflow.tracking_uri, "deepsummit", "1")
    planned = pl.read_parquet(trained_registry.snapshot / PLANNED_TEST_FILE)
    answer = model.predict(planned.drop(KEY_COLUMNS).to_pandas())
    assert set(answer["answered_by"]) == {artifact.parts}
    served = answer["probability"].to_numpy(dtype=float)
    np.testing.assert_allclose(served, expected, atol=1e-6)

    stored = champion_predictions(trained_registry)
    reported = MlflowClient(settings.mlflow.tracking_uri).get_run(
        trained_registry.report.mlflow_run_id
    )
    labels = test["label"].to_numpy()
    assert roc_auc_score(labels, stored) == pytest.approx(
        reported.data.metrics["served_blend_test_auc"], abs=1e-6
    )
    assert reported.data.tags["served_model"] == artifact.parts
    assert not np.allclose(stored, served)  # the refit is another model than the one judged


def test_a_refit_beside_the_evaluation_is_the_refit_after_it(
    trained_registry: TrainedRegistry, tmp_path: Path
) -> None:
    """A recipe that keeps its last epoch needs nothing from the evaluation to refit: the refit
    started at once in its own process trains the network the refit after the evaluation
    trains, weight for weight. A recipe that keeps its best epoch waits for it."""
    base = trained_registry.settings
    assert base.train.keep == "best"
    with refit_beside(Recipe.of(base), trained_registry.snapshot, tmp_path / "best") as pending:
        assert pending is None
    settings = base.model_copy(
        update={"train": base.train.model_copy(update={"keep": "last", "seeds": 1})}
    )
    data = TrainingData.read(trained_registry.snapshot)
    recipe = Recipe.of(settings)
    after = refit(
        recipe, data.snapshot, data.windows,
        preprocessing_for(data.preprocessor, data.snapshot, data.windows),
        {settings.train.seed: settings.train.max_epochs}, tmp_path / "after",
    )  # fmt: skip
    with refit_beside(recipe, trained_registry.snapshot, tmp_path / "beside", 1) as pending:
        assert pending is not None
        beside = pending.result(timeout=900)
    assert (beside.rows, beside.trained_through) == (after.rows, "2025 Summer")
    assert [len(r.history) for r in beside.results] == [settings.train.max_epochs]
    expected = after.results[0].model.state_dict()
    for name, tensor in beside.results[0].model.state_dict().items():
        assert torch.equal(tensor, expected[name]), name


def test_the_gate_refuses_a_challenger_whose_advantage_is_within_noise(
    trained_registry: TrainedRegistry,
) -> None:
    settings = trained_registry.settings
    client = MlflowClient(settings.mlflow.tracking_uri)
    champion = champion_predictions(trained_registry)
    # Retrained on unchanged data: the same predictions never move the alias.
    same = decide(
        client,
        settings.mlflow,
        settings.backtest,
        candidate_of(trained_registry, DECIDED_ONLY, champion),
    )
    assert not same.promoted
    assert (same.difference.estimate, same.difference.low, same.difference.high) == (0, 0, 0)
    # A challenger that differs by noise (small beside the spread of the champion's answers):
    # its interval spans 0, so no.
    rng = np.random.default_rng(0)
    noisy = np.clip(champion + rng.normal(0, 0.05 * champion.std(), champion.size), 0, 1)
    decision = decide(
        client,
        settings.mlflow,
        settings.backtest,
        candidate_of(trained_registry, DECIDED_ONLY, noisy),
    )
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
    first = gate(
        client, settings.mlflow, settings.backtest, candidate_of(trained_registry, constant, flat)
    )
    assert first.promoted and "no champion yet" in first.reason  # an empty store

    # The gate reads a version's test predictions: a second version whose predictions follow
    # the outcome (noisily) clearly beats the constant one.
    better = register_constant(trained_registry, settings, tmp_path / "again")
    labels = candidate_of(trained_registry, better, flat).predictions["label"].to_numpy()
    noise = np.random.default_rng(1).normal(0, 0.3, flat.size)
    ranked = np.clip(0.5 + 0.2 * (labels - 0.5) + noise, 0, 1)
    decision = gate(
        client, settings.mlflow, settings.backtest, candidate_of(trained_registry, better, ranked)
    )
    assert decision.promoted and decision.difference.low > 0
    assert champion_version(settings) == better.version
    tags = client.get_model_version(settings.mlflow.registered_model, better.version).tags
    assert float(tags["auc_difference_ci_low"]) == pytest.approx(decision.difference.low)
    assert tags["compared_with"] == constant.version

    worse = gate(
        client, settings.mlflow, settings.backtest, candidate_of(trained_registry, constant, flat)
    )
    assert not worse.promoted and worse.difference.high < 0
    assert champion_version(settings) == better.version


def test_a_challenger_worse_by_member_group_beyond_noise_is_refused(
    trained_registry: TrainedRegistry, tmp_path: Path
) -> None:
    """Ahead on the test split's AUC beyond noise, but saying on the member check that almost
    nobody summits: the gate refuses it and says why; the tags keep both differences."""
    settings = registry_settings(tmp_path / "store", trained_registry.settings)
    client = MlflowClient(settings.mlflow.tracking_uri)
    flat = np.full(len(champion_predictions(trained_registry)), 0.5)
    first = register_constant(trained_registry, settings, tmp_path)
    gate(client, settings.mlflow, settings.backtest, candidate_of(trained_registry, first, flat))
    challenger = register_constant(trained_registry, settings, tmp_path / "again")
    labels = candidate_of(trained_registry, challenger, flat).predictions["label"].to_numpy()
    ranked = np.clip(
        0.5 + 0.2 * (labels - 0.5) + np.random.default_rng(1).normal(0, 0.3, flat.size), 0, 1
    )
    hopeless = np.full(champion_answers(trained_registry, MEMBER_PREDICTIONS_ARTIFACT).height, 0.02)
    decision = gate(
        client,
        settings.mlflow,
        settings.backtest,
        candidate_of(trained_registry, challenger, ranked, hopeless),
    )
    assert decision.difference.low > 0 and decision.group_difference.low > 0
    assert not decision.promoted and "worse calibrated by member group" in decision.reason
    assert champion_version(settings) == first.version
    tags = client.get_model_version(settings.mlflow.registered_model, challenger.version).tags
    assert float(tags["group_error_difference_ci_low"]) == pytest.approx(
        decision.group_difference.low
    )


def test_a_changed_test_split_compares_the_rows_both_held_out(
    trained_registry: TrainedRegistry,
) -> None:
    """The records moved on: the gate pairs the test rows both evaluations held out, and with
    too few of them it does not decide."""
    settings = trained_registry.settings
    client = MlflowClient(settings.mlflow.tracking_uri)
    champion = champion_predictions(trained_registry)
    moved = dataclasses.replace(
        candidate_of(trained_registry, DECIDED_ONLY, champion), test_digest="another split"
    )
    newest = moved.predictions.filter(pl.col("year") >= 2024)  # the older season is gone
    decision = decide(
        client, settings.mlflow, settings.backtest, dataclasses.replace(moved, predictions=newest)
    )
    assert "on the test rows both held out" in decision.reason
    assert f"over {newest.height:,} rows" in decision.reason
    assert decision.difference.estimate == pytest.approx(0.0, abs=1e-9)

    unseen = newest.with_columns(year=pl.col("year") + 1)  # rows the champion never scored
    apart = decide(
        client, settings.mlflow, settings.backtest, dataclasses.replace(moved, predictions=unseen)
    )
    assert not apart.promoted and "shares 0 held-out rows" in apart.reason


def test_a_champion_never_refit_on_its_newest_seasons_is_replaced(
    trained_registry: TrainedRegistry, tmp_path: Path
) -> None:
    settings = registry_settings(tmp_path / "store", trained_registry.settings)
    client = MlflowClient(settings.mlflow.tracking_uri)
    old = register_constant(trained_registry, settings, tmp_path)
    flat = np.full(len(champion_predictions(trained_registry)), 0.5)
    gate(client, settings.mlflow, settings.backtest, candidate_of(trained_registry, old, flat))
    client.delete_model_version_tag(
        settings.mlflow.registered_model, old.version, TAG_TRAINED_THROUGH
    )
    new = register_constant(trained_registry, settings, tmp_path / "new")
    decision = gate(
        client, settings.mlflow, settings.backtest, candidate_of(trained_registry, new, flat)
    )
    assert decision.promoted and "never refit on its newest seasons" in decision.reason
    assert champion_version(settings) == new.version


def test_inputs_known_after_the_climb_never_make_a_champion(
    trained_registry: TrainedRegistry,
) -> None:
    settings = trained_registry.settings
    client = MlflowClient(settings.mlflow.tracking_uri)
    candidate = dataclasses.replace(
        candidate_of(trained_registry, DECIDED_ONLY, champion_predictions(trained_registry)),
        inputs_known_by=Known.AFTER_CLIMB,
    )
    decision = decide(client, settings.mlflow, settings.backtest, candidate)
    assert not decision.promoted and "known only after the climb" in decision.reason


def test_a_champion_on_another_weather_source_is_not_compared(
    trained_registry: TrainedRegistry,
) -> None:
    settings = trained_registry.settings
    candidate = dataclasses.replace(
        candidate_of(trained_registry, DECIDED_ONLY, champion_predictions(trained_registry)),
        weather_source="open-meteo",
    )
    decision = decide(
        MlflowClient(settings.mlflow.tracking_uri), settings.mlflow, settings.backtest, candidate
    )
    assert not decision.promoted
    assert "weather source 'archive'" in decision.reason


def test_a_version_whose_files_changed_is_never_loaded(
    trained_registry: TrainedRegistry, tmp_path: Path
) -> None:
    settings = registry_settings(tmp_path / "store", trained_registry.settings)
    version = register_constant(trained_registry, settings, tmp_path).version
    load_verified(settings.mlflow.tracking_uri, "deepsummit", version)  # untouched: loads
    stored = next((tmp_path / "store" / "artifacts").rglob("calibration.json"))
    stored.write_text(stored.read_text().replace('"method"', '"method" ', 1))
    with pytest.raises(ModelFilesChanged, match=f"deepsummit v{version}: its files"):
        load_verified(settings.mlflow.tracking_uri, "deepsummit", version)
