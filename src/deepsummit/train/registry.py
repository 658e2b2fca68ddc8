"""The MLflow registry side: register every trained model, move `@champion` only beyond noise,
and load a registered version only when its files are the ones registered.

The gate compares recipes, each judged out of time. A registered version was refit on every
season through its newest (deepsummit/train/stage.py), so it has learnt the rows any later test
split holds; what the gate compares are the evaluation's predictions on held-out rows, which
every version keeps in its run (`evaluation/test_predictions.parquet`): the new version's
against the champion's, on the test rows both held out (all of them when the test split is the
same; where the records moved on, the seasons both tests cover). A paired bootstrap over
expeditions of AUC(new) − AUC(champion) (deepsummit/train/bootstrap.py) decides: the new
version becomes champion only when the lower bound of that difference's 95% interval is above
0, or when there is no usable champion: none yet, one that reads inputs known only after the
climb (or does not say), or one that was never refit on its newest seasons (it records no
`trained_through`). Retraining on unchanged data gives the same predictions, a difference of 0,
and never moves the alias. A champion trained on another weather source, or whose held-out rows
share too few with this run's, is not compared: no automatic decision then. Every decision, the
difference and its interval are written on the new version (tags and description).
"""

from __future__ import annotations

import importlib.metadata
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path

import mlflow
import pandas as pd
import polars as pl
from mlflow import MlflowClient
from mlflow.entities.model_registry import ModelVersion

from deepsummit.contracts.artifact import ARTIFACT_NAME, ModelArtifact, files_digest
from deepsummit.contracts.champion import (
    TAG_DECISION,
    TAG_FILES_DIGEST,
    TAG_KNOWN_BY,
    TAG_REASON,
    TAG_TEST_DIGEST,
    TAG_TRAINED_THROUGH,
    TAG_WEATHER_SOURCE,
    current_champion,
)
from deepsummit.core.config import MlflowConfig
from deepsummit.core.errors import PipelineError
from deepsummit.core.inputs import Known
from deepsummit.core.planned import KEY_COLUMNS
from deepsummit.serve.pyfunc import MODEL_CODE_FILE, signature
from deepsummit.train.bootstrap import Interval, paired_auc_difference, replicate_weights

logger = logging.getLogger(__name__)

PREDICTIONS_ARTIFACT = "evaluation/test_predictions.parquet"
# Fewer shared held-out rows than this, or one outcome only among them: not compared.
MIN_COMPARED_ROWS = 200


@dataclass(frozen=True)
class Candidate:
    """What the gate needs to know about a freshly registered version."""

    version: str
    test_digest: str
    weather_source: str
    inputs_known_by: Known
    predictions: pl.DataFrame  # KEY_COLUMNS, label, probability (calibrated) per test row
    trained_through: str  # the newest season the registered model learnt from


@dataclass(frozen=True)
class GateDecision:
    promoted: bool
    reason: str
    previous_champion: str | None  # version number, None when there was none
    difference: Interval | None  # AUC(new) − AUC(champion) on the same rows, when compared


def _champion_predictions(
    config: MlflowConfig, champion: ModelVersion, candidate: Candidate
) -> tuple[pl.DataFrame, str]:
    """The champion's evaluation's calibrated probabilities on the held-out rows it shares with
    the candidate's, and which rows those are."""
    local = mlflow.artifacts.download_artifacts(
        run_id=champion.run_id, artifact_path=PREDICTIONS_ARTIFACT, tracking_uri=config.tracking_uri
    )
    theirs = pl.read_parquet(local)
    if champion.tags.get(TAG_TEST_DIGEST) == candidate.test_digest:
        return theirs, "on the same test split, held out by both"
    return theirs, "on the test rows both held out (the records moved on)"


def decide(client: MlflowClient, config: MlflowConfig, candidate: Candidate) -> GateDecision:
    """Compare the candidate with the current champion (see the module docstring)."""
    alias = config.champion_alias
    if candidate.inputs_known_by is Known.AFTER_CLIMB:
        return GateDecision(
            False,
            f"it reads inputs known only after the climb: never @{alias} of a decision-time "
            "model (register retrospective models under their own name)",
            None,
            None,
        )
    champion = current_champion(client, config.registered_model, alias)
    if champion is None:
        return GateDecision(True, "first model: there was no champion yet", None, None)
    version = str(champion.version)
    known_by = champion.tags.get(TAG_KNOWN_BY)
    if known_by != candidate.inputs_known_by.value:
        return GateDecision(
            True,
            f"champion v{version} reads inputs known {known_by or 'at an unrecorded time'}, "
            f"this version only what is known {candidate.inputs_known_by.value}",
            version,
            None,
        )
    if TAG_TRAINED_THROUGH not in champion.tags:
        return GateDecision(
            True,
            f"champion v{version} was never refit on its newest seasons (it records no "
            f"{TAG_TRAINED_THROUGH}); this version learnt every season through "
            f"{candidate.trained_through}",
            version,
            None,
        )
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
    try:
        theirs, basis = _champion_predictions(config, champion, candidate)
    except Exception as error:  # its predictions are gone: no automatic decision
        logger.warning("champion v%s's held-out predictions could not be read: %s", version, error)
        return GateDecision(
            False,
            f"champion v{version}'s held-out predictions could not be read ({error}); "
            f"@{alias} not moved (move it by hand if intended)",
            version,
            None,
        )
    paired = candidate.predictions.join(
        theirs.select(*KEY_COLUMNS, "label", champion=pl.col("probability")),
        on=[*KEY_COLUMNS, "label"],
    )
    if paired.height < MIN_COMPARED_ROWS or paired["label"].n_unique() < 2:
        return GateDecision(
            False,
            f"champion v{version}'s evaluation shares {paired.height} held-out rows with this "
            f"run's test split (at least {MIN_COMPARED_ROWS} of both outcomes are needed): not "
            f"comparable; @{alias} not moved (move it by hand if intended)",
            version,
            None,
        )
    groups = paired.select(pl.format("{}/{}", "expid", "year")).to_series().to_numpy()
    difference = paired_auc_difference(
        paired["label"].to_numpy(),
        paired["probability"].to_numpy(),
        paired["champion"].to_numpy(),
        replicate_weights(groups),
    )
    promoted = difference.low > 0
    verdict = "beats" if promoted else "does not beat"
    reason = (
        f"held-out AUC difference against champion v{version} {difference.render(4)} over "
        f"{paired.height:,} rows: {verdict} it beyond noise (promoted only when the 95% "
        f"interval is above 0; {basis}; test split {candidate.test_digest[:12]})"
    )
    return GateDecision(promoted, reason, version, difference)


def record_decision(
    client: MlflowClient, config: MlflowConfig, candidate: Candidate, decision: GateDecision
) -> None:
    """Write the decision on the version, and move the alias when promoted."""
    name, alias = config.registered_model, config.champion_alias
    if decision.promoted:
        client.set_registered_model_alias(name, alias, candidate.version)
        # Read back: a gate run without the registry slot (by hand, elsewhere) may have moved
        # it at the same moment; say so rather than report a champion that is not.
        now = str(client.get_model_version_by_alias(name, alias).version)
        if now != candidate.version:
            raise PipelineError(
                f"{name}@{alias} moved to v{now} while v{candidate.version} was being promoted; "
                "run one gate at a time (the registry slot) and train again"
            )
    tags = {
        TAG_DECISION: "promoted" if decision.promoted else "challenger",
        TAG_REASON: decision.reason,
    }
    if decision.difference is not None:
        tags |= {
            "auc_difference": repr(decision.difference.estimate),
            "auc_difference_ci_low": repr(decision.difference.low),
            "auc_difference_ci_high": repr(decision.difference.high),
            "compared_with": str(decision.previous_champion),
        }
    for key, value in tags.items():
        client.set_model_version_tag(name, candidate.version, key, value)
    headline = f"@{alias}" if decision.promoted else "challenger (not champion)"
    client.update_model_version(
        name, candidate.version, description=f"{headline}: {decision.reason}"
    )
    logger.info("model %s v%s: %s", name, candidate.version, decision.reason)


def gate(client: MlflowClient, config: MlflowConfig, candidate: Candidate) -> GateDecision:
    """Decide and record; the candidate's facts and predictions are kept first so that a later
    gate can compare with it."""
    name = config.registered_model
    for key, value in (
        (TAG_TEST_DIGEST, candidate.test_digest),
        (TAG_WEATHER_SOURCE, candidate.weather_source),
        (TAG_KNOWN_BY, candidate.inputs_known_by.value),
        (TAG_TRAINED_THROUGH, candidate.trained_through),
    ):
        client.set_model_version_tag(name, candidate.version, key, value)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / Path(PREDICTIONS_ARTIFACT).name
        candidate.predictions.write_parquet(path)
        run_id = client.get_model_version(name, candidate.version).run_id
        client.log_artifact(run_id, str(path), str(Path(PREDICTIONS_ARTIFACT).parent))
    decision = decide(client, config, candidate)
    record_decision(client, config, candidate, decision)
    return decision


def package_requirements() -> list[str]:
    """The installed deepsummit distribution's own pins (no inference, no extras)."""
    requirements = importlib.metadata.requires("deepsummit") or []
    return [requirement for requirement in requirements if "extra ==" not in requirement]


def log_and_register(
    config: MlflowConfig,
    directory: Path,
    input_example: pd.DataFrame,
    artifact: ModelArtifact,
) -> ModelVersion:
    """Log the pyfunc (from code, with the artifact folder) in the active run, register it, and
    record the digest of its files as they are stored."""
    info = mlflow.pyfunc.log_model(
        name="model",
        python_model=str(MODEL_CODE_FILE),
        artifacts={ARTIFACT_NAME: str(directory)},
        signature=signature(),
        input_example=input_example,
        pip_requirements=package_requirements(),
        metadata={"seeds": artifact.seeds},
    )
    version = mlflow.register_model(info.model_uri, config.registered_model)
    with tempfile.TemporaryDirectory() as folder:
        mlflow.artifacts.download_artifacts(artifact_uri=info.model_uri, dst_path=folder)
        digest = files_digest(Path(folder))
    MlflowClient(config.tracking_uri).set_model_version_tag(
        config.registered_model, str(version.version), TAG_FILES_DIGEST, digest
    )
    return version
