"""The MLflow registry side: register every trained model, move `@champion` only on merit.

A new version becomes champion only if its test AUC beats the champion's on the same test
split. "Same" is checked, not assumed: each version carries the digest of the test rows it was
scored on; when the digests differ, the champion is loaded and re-scored on the new test rows.
A champion trained on another weather source is never fed this run's weather (the data
contract forbids it), so no automatic decision is made then. Every decision and its reason is
written on the new version (tags and description).
"""

from __future__ import annotations

import importlib.metadata
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import mlflow
import numpy as np
import pandas as pd
from mlflow import MlflowClient
from mlflow.entities.model_registry import ModelVersion
from mlflow.models import infer_signature
from sklearn.metrics import roc_auc_score

from pipeline.config import MlflowConfig
from pipeline.train.artifact import MODEL_CODE_FILE, ModelFiles

logger = logging.getLogger(__name__)

# Tags every registered version carries (written before the gate runs).
TAG_TEST_AUC = "test_auc"
TAG_TEST_DIGEST = "test_split_digest"
TAG_WEATHER_SOURCE = "weather_source"
TAG_DECISION = "champion_decision"
TAG_REASON = "champion_reason"

# Loads a registered version as something with `.predict(frame) -> probabilities`.
ModelLoader = Callable[[str], object]


@dataclass(frozen=True)
class Candidate:
    """What the gate needs to know about a freshly registered version."""

    version: str
    test_auc: float
    test_digest: str
    weather_source: str
    test_frame: pd.DataFrame  # the test rows in the pyfunc's input layout
    test_labels: pd.Series


@dataclass(frozen=True)
class GateDecision:
    promoted: bool
    reason: str
    previous_champion: str | None  # version number, None when there was none
    champion_auc: float | None  # the previous champion's AUC on this run's test split


def current_champion(client: MlflowClient, name: str, alias: str) -> ModelVersion | None:
    models = client.search_registered_models(filter_string=f"name = '{name}'")
    if not models or alias not in models[0].aliases:
        return None
    return client.get_model_version_by_alias(name, alias)


def decide(
    client: MlflowClient, config: MlflowConfig, candidate: Candidate, load_model: ModelLoader
) -> GateDecision:
    """Compare the candidate with the current champion (see the module docstring)."""
    name, alias = config.registered_model, config.champion_alias
    champion = current_champion(client, name, alias)
    if champion is None:
        return GateDecision(True, "first model: there was no champion yet", None, None)
    version = str(champion.version)
    champion_source = champion.tags.get(TAG_WEATHER_SOURCE)
    if champion_source != candidate.weather_source:
        return GateDecision(
            False,
            f"champion v{version} was trained on weather source {champion_source!r}, this "
            f"version on {candidate.weather_source!r}: not comparable on the same inputs; "
            f"@{alias} not moved (move it by hand if intended)",
            version,
            None,
        )
    if champion.tags.get(TAG_TEST_DIGEST) == candidate.test_digest:
        champion_auc = float(champion.tags[TAG_TEST_AUC])
        basis = "its recorded test AUC on the same test split"
    else:
        champion_auc = _rescore(client, name, version, candidate, load_model)
        basis = "re-scored on this run's test split (the split changed)"
    if math.isnan(champion_auc):
        return GateDecision(
            False,
            f"champion v{version} could not be scored on this run's test split; "
            f"@{alias} not moved (move it by hand if intended)",
            version,
            None,
        )
    promoted = candidate.test_auc > champion_auc
    verdict = "beats" if promoted else "does not beat"
    reason = (
        f"test AUC {candidate.test_auc:.4f} {verdict} champion v{version} "
        f"({champion_auc:.4f}, {basis}; test split {candidate.test_digest[:12]})"
    )
    return GateDecision(promoted, reason, version, champion_auc)


def _rescore(
    client: MlflowClient, name: str, version: str, candidate: Candidate, load_model: ModelLoader
) -> float:
    try:
        probabilities = load_model(f"models:/{name}/{version}").predict(candidate.test_frame)
    except Exception as error:  # any failure to load or run an old model: no auto-decision
        logger.warning("champion v%s could not be scored: %s", version, error)
        return math.nan
    return float(roc_auc_score(candidate.test_labels, probabilities))


def record_decision(
    client: MlflowClient, config: MlflowConfig, candidate: Candidate, decision: GateDecision
) -> None:
    """Write the decision on the version, and move the alias when promoted."""
    name, alias = config.registered_model, config.champion_alias
    if decision.promoted:
        client.set_registered_model_alias(name, alias, candidate.version)
    client.set_model_version_tag(
        name, candidate.version, TAG_DECISION, "promoted" if decision.promoted else "challenger"
    )
    client.set_model_version_tag(name, candidate.version, TAG_REASON, decision.reason)
    headline = f"@{alias}" if decision.promoted else "challenger (not champion)"
    client.update_model_version(
        name, candidate.version, description=f"{headline}: {decision.reason}"
    )
    logger.info("model %s v%s: %s", name, candidate.version, decision.reason)


def gate(
    client: MlflowClient, config: MlflowConfig, candidate: Candidate, load_model: ModelLoader
) -> GateDecision:
    """Decide and record; the candidate's facts are tagged first so a later gate can use them."""
    name = config.registered_model
    for key, value in (
        (TAG_TEST_AUC, repr(candidate.test_auc)),
        (TAG_TEST_DIGEST, candidate.test_digest),
        (TAG_WEATHER_SOURCE, candidate.weather_source),
    ):
        client.set_model_version_tag(name, candidate.version, key, value)
    decision = decide(client, config, candidate, load_model)
    record_decision(client, config, candidate, decision)
    return decision


def package_requirements() -> list[str]:
    """The installed deepsummit distribution's own pins (no inference, no extras)."""
    requirements = importlib.metadata.requires("deepsummit") or []
    return [requirement for requirement in requirements if "extra ==" not in requirement]


def log_and_register(
    config: MlflowConfig,
    files: ModelFiles,
    input_example: pd.DataFrame,
    example_output: np.ndarray,
) -> ModelVersion:
    """Log the pyfunc (from code, with its artifacts) in the active run and register it."""
    info = mlflow.pyfunc.log_model(
        name="model",
        python_model=str(MODEL_CODE_FILE),
        artifacts=files.as_artifacts(),
        signature=infer_signature(input_example, example_output),
        input_example=input_example,
        pip_requirements=package_requirements(),
    )
    return mlflow.register_model(info.model_uri, config.registered_model)
