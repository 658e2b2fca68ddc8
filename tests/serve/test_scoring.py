"""Serving computes what training computes: the registered model's scoring path on planned
attempts (the frozen history, the request's own daily weather, the artifact's preprocessing)
gives the training path's probability for the same attempts; a bad row gets its own error."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import polars as pl
import pytest
import torch

from deepsummit.contracts.artifact import ModelArtifact
from deepsummit.contracts.blend import Blend, mix
from deepsummit.contracts.calibration import Calibrator
from deepsummit.contracts.distribution import DistributionProfile
from deepsummit.contracts.snapshot import (
    PLANNED_TEST_FILE,
    load_features,
    load_history,
)
from deepsummit.contracts.trees import CATBOOST
from deepsummit.core.baseline_sections import BaselinesConfig
from deepsummit.core.inputs import WEATHER_VARIABLES
from deepsummit.core.planned import KEY_COLUMNS
from deepsummit.core.sections import TrainConfig
from deepsummit.model.config import ModelConfig
from deepsummit.model.transformer import DeepSummitTransformer
from deepsummit.serve.inference import predict_logits
from deepsummit.serve.planned import parse_planned
from deepsummit.serve.scoring import WEATHER_ABSENT_NOTE, planned_features, score
from deepsummit.train.blending import refit_trees

pytest_plugins = ["features_fixtures"]


@pytest.fixture(scope="module")
def served(bundle_features):
    """An artifact of two freshly initialised networks (equality needs no training) over the
    bundle's real features snapshot, and that snapshot's arrays and planned test rows."""
    _, report, _ = bundle_features
    arrays, preprocessor = load_features(report.directory)
    config = ModelConfig(hidden_size=16, num_layers=1, num_heads=2).with_inputs(
        preprocessor.model_dimensions()
    )
    networks = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        networks.append(DeepSummitTransformer(config).eval())
    artifact = ModelArtifact(
        networks=networks,
        seeds=[1, 2],
        preprocessor=preprocessor,
        calibrator=Calibrator("platt", scale=0.8, shift=0.3),
        history=load_history(report.directory),
        drift_reference=DistributionProfile({}, {}, "none: scoring reads no drift reference"),
    )
    planned = pl.read_parquet(report.directory / PLANNED_TEST_FILE)
    return artifact, arrays, report, planned


def _training_probability(artifact, arrays, report, keys: pl.DataFrame) -> np.ndarray:
    """What the training path gives the same rows (the snapshot's test arrays): the
    calibrated mean of the members' probabilities, over every seed's network."""
    test_rows = pl.read_parquet(report.directory / "features.parquet").filter(
        pl.col("split") == "test"
    )
    position = keys.join(
        test_rows.with_row_index("i"), on=list(KEY_COLUMNS), how="left", maintain_order="left"
    )["i"].to_numpy()
    inputs = arrays["test"].subset(position).model_inputs()
    members = np.concatenate([predict_logits(network, inputs) for network in artifact.networks])
    probability = (1 / (1 + np.exp(-members.astype(np.float64)))).mean(axis=0)
    logit = np.log(probability / (1 - probability))
    return artifact.calibrator.probabilities(logit, test_rows[position])


def test_serving_gives_the_training_probability_on_200_test_rows(served) -> None:
    artifact, arrays, report, planned = served
    rows = planned.sample(200, seed=3)
    scored = score(artifact, rows.drop(KEY_COLUMNS).to_pandas())
    assert scored.errors == [None] * 200
    expected = _training_probability(artifact, arrays, report, rows.select(KEY_COLUMNS))
    np.testing.assert_allclose(scored.probability, expected, rtol=0, atol=1e-6)
    assert (scored.low <= scored.probability).all() and (scored.probability <= scored.high).all()
    assert (scored.low < scored.high).any()  # two networks, two answers


def test_a_bad_row_gets_its_own_error_and_the_others_are_scored(served) -> None:
    artifact, _, _, planned = served
    with_weather = pl.col("temperature_2m_mean").list.drop_nulls().list.len() > 0
    good = planned.filter(with_weather).head(3).drop(KEY_COLUMNS).to_pandas()
    alone = score(artifact, good).probability
    bad = good.iloc[[0] * 6].reset_index(drop=True)
    bad.loc[0, "peak"] = "ATLANTIS"
    bad.loc[1, "age"] = 300.0
    bad.loc[2, "push_date"] = "2019-02-30"
    bad.at[3, "temperature_2m_mean"] = [1.0] * 10
    for name in WEATHER_VARIABLES:  # half a window: the first 45 days missing
        bad.at[4, name] = [None] * 45 + list(good.at[0, name][45:])
    for name in WEATHER_VARIABLES:  # no weather at all: scored with the weather absent
        bad.at[5, name] = None
    scored = score(artifact, pd.concat([good, bad], ignore_index=True))
    np.testing.assert_allclose(scored.probability[:3], alone, atol=1e-6)  # float32 batches
    assert scored.errors[3:] == [
        "unknown peak 'ATLANTIS': not in the records the model was trained with",
        "age 300: not in 1..100",
        "push_date '2019-02-30': not a date YYYY-MM-DD",
        "temperature_2m_mean: 10 daily values, expected 90 (D-89 … D)",
        "weather: 45 of 90 days missing (the model allows 0); send D-89 … D complete, or no "
        "weather at all for an answer without it",
        None,
    ]
    assert np.isnan(scored.probability[3:8]).all()
    assert scored.weather_used[3:] == [None] * 5 + [False]
    assert WEATHER_ABSENT_NOTE in scored.notes[8]
    assert scored.probability[8] != pytest.approx(alone[0], abs=1e-6)  # the weather mattered


def test_unknown_categories_and_another_weather_source_are_notes(served) -> None:
    artifact, _, _, planned = served
    request = planned.head(1).drop(KEY_COLUMNS).to_pandas()
    request.loc[0, "nationality"] = "Atlantis"
    request.loc[0, "weather_source"] = "forecast"
    scored = score(artifact, request)
    assert scored.errors == [None]
    assert "weather from 'forecast', the model was trained on 'archive'" in scored.notes[0]
    assert "nationality 'Atlantis' is not in the training vocabulary: unknown" in scored.notes[0]


def test_a_blend_mixes_the_transformers_answer_and_band_with_its_trees(served) -> None:
    """A version serving a blend answers the mix of its parts' answers (each through its map),
    both ends of the band mixed the same way, and says which parts answered."""
    artifact, arrays, _, planned = served
    trees = refit_trees(
        CATBOOST, 5, arrays["train"].subset(np.arange(2000)),
        artifact.preprocessor.categorical_cardinalities, BaselinesConfig(), TrainConfig(), seeds=1,
    )  # fmt: skip
    blend = Blend(trees, 0.7, Calibrator("platt", scale=1.1, shift=0.2))
    blended = dataclasses.replace(artifact, blend=blend)
    rows = planned.sample(50, seed=5).drop(KEY_COLUMNS).to_pandas()
    alone, mixed = score(artifact, rows), score(blended, rows)
    assert (alone.parts, mixed.parts) == ("transformer", f"transformer 0.70 + {CATBOOST} 0.30")
    assert mixed.frame()["answered_by"].eq(mixed.parts).all()
    features, windows = planned_features(blended, parse_planned(rows), [None] * len(rows))
    tree = blend.tree_answers(
        artifact.preprocessor.transform(features, windows, ("window_id", "smtdate")), features
    )
    for part in ("probability", "low", "high"):
        expected = mix(getattr(alone, part), tree, 0.7)
        np.testing.assert_allclose(getattr(mixed, part), expected, rtol=0, atol=1e-12)
