"""The MLflow registry side: the champion gate, which moves `@champion` only beyond noise and
loads a registered version only when its files are the ones registered (every trained model is
registered first, by deepsummit/train/registration.py).

The gate compares recipes, each judged out of time. A registered version was refit on every
season through its newest (deepsummit/train/stage.py), so it has learnt the rows any later test
split holds; what the gate compares are the evaluation's answers on held-out rows, which every
version keeps in its run: the test split's (`evaluation/test_predictions.parquet`) and the
member check's (`evaluation/member_predictions.parquet`), the new version's against the
champion's on the rows both held out. Paired bootstraps over expeditions decide
(deepsummit/train/bootstrap.py): the new version becomes champion only when the lower bound of
the 95% interval of AUC(new) − AUC(champion) on the test rows is above 0, and it is not worse
calibrated by member group beyond noise (the lower bound of the interval of its group error
minus the champion's, deepsummit/train/member_groups.py, is not above 0; a champion that keeps
no member-check answers is compared on the AUC alone, and the decision says so). It is also
promoted when there is no usable champion: none yet, one that reads inputs known only after the
climb (or does not say), or one that was never refit on its newest seasons (it records no
`trained_through`). Retraining on unchanged data gives the same answers, differences of 0, and
never moves the alias. A champion trained on another weather source, or whose held-out rows
share too few with this run's, is not compared: no automatic decision then. Every decision, the
differences and their intervals are written on the new version (tags and description).

Before any comparison the gate loads the new version from the registry, as `predict` and
`mlflow models serve` do: its files must have the digest registered with them and the digest of
the files trained, and it must answer a few test rows as the trained model did. A version is
created marked `deepsummit.unverified` and the mark is lifted only once the digest of its stored
files is recorded and found to be the trained files': a registration cut short (MLflow gone
after the version was created) or files that changed on the way leave the mark, and a marked
version never becomes champion and is never loaded. Registration and the gate wait out a short
MLflow outage as the training loop does (deepsummit/train/tracking.py).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import mlflow
import numpy as np
import polars as pl
from mlflow import MlflowClient
from mlflow.entities.model_registry import ModelVersion

from deepsummit.contracts.artifact import files_digest
from deepsummit.contracts.champion import (
    ARTIFACT_PATH,
    TAG_DECISION,
    TAG_KNOWN_BY,
    TAG_REASON,
    TAG_TEST_DIGEST,
    TAG_TRAINED_THROUGH,
    TAG_WEATHER_SOURCE,
    ModelFilesChanged,
    RegisteredVersion,
    current_champion,
    registry_reachable,
    verified_copy,
)
from deepsummit.core.errors import PipelineError
from deepsummit.core.inputs import Known
from deepsummit.core.planned import KEY_COLUMNS
from deepsummit.core.sections import BacktestConfig, MlflowConfig
from deepsummit.train.bootstrap import Interval, paired_auc_difference, replicate_weights
from deepsummit.train.comparison import difference_name
from deepsummit.train.member_groups import ALL_PEAKS, group_calibration
from deepsummit.train.registration import TrainedModel
from deepsummit.train.tracking import when_tracking_answers

logger = logging.getLogger(__name__)

PREDICTIONS_ARTIFACT = "evaluation/test_predictions.parquet"
MEMBER_PREDICTIONS_ARTIFACT = "evaluation/member_predictions.parquet"
# Fewer shared held-out rows than this, or one outcome only among them: not compared.
MIN_COMPARED_ROWS = 200
# How far a version loaded from the registry may answer from the trained model: the same
# weights and code on the same rows, so only the last bits of float32 arithmetic.
ANSWER_TOLERANCE = 1e-6


@dataclass(frozen=True)
class Candidate:
    """What the gate needs to know about a freshly registered version."""

    version: str
    test_digest: str
    weather_source: str
    inputs_known_by: Known
    predictions: pl.DataFrame  # KEY_COLUMNS, label, probability (as served) per test row
    # The member check's rows: KEY_COLUMNS, peakid, label, the member groups' columns and the
    # probability judged there.
    member_predictions: pl.DataFrame
    trained_through: str  # the newest season the registered model learnt from
    trained: TrainedModel  # what the version loaded from the registry must be


@dataclass(frozen=True)
class GateDecision:
    promoted: bool
    reason: str
    previous_champion: str | None  # version number, None when there was none
    difference: Interval | None  # AUC(new) − AUC(champion) on the same rows, when compared
    # group error(new) − group error(champion) on the member check's shared rows, when compared
    group_difference: Interval | None = None


def _champion_answers(config: MlflowConfig, champion: ModelVersion, artifact: str) -> pl.DataFrame:
    """The champion's evaluation's answers on held-out rows, as its run keeps them."""
    local = mlflow.artifacts.download_artifacts(
        run_id=champion.run_id, artifact_path=artifact, tracking_uri=config.tracking_uri
    )
    return pl.read_parquet(local)


def _group_verdict(
    config: MlflowConfig, judging: BacktestConfig, champion: ModelVersion, candidate: Candidate
) -> tuple[Interval | None, str]:
    """group error(new) − group error(champion) on the member check's rows both answered, and
    what it says; (None, why) when the champion keeps no member-check answers to pair with."""
    try:
        theirs = _champion_answers(config, champion, MEMBER_PREDICTIONS_ARTIFACT)
    except Exception:  # a champion from before the member check: the AUC decides alone
        if not registry_reachable(config.tracking_uri):
            raise  # an outage, not a missing file: the gate waits for the server
        return None, "member groups not compared: the champion keeps no member-check answers"
    paired = candidate.member_predictions.join(
        theirs.select(*KEY_COLUMNS, champion=pl.col("probability")), on=KEY_COLUMNS
    )
    if paired.height < MIN_COMPARED_ROWS:
        return None, f"member groups not compared: {paired.height} member rows in common"
    groups = group_calibration(
        paired,
        {"new": paired["probability"].to_numpy(), "champion": paired["champion"].to_numpy()},
        ALL_PEAKS,
        judging.min_group_members,
    )
    difference = groups.differences[difference_name("new", "champion")]
    return difference, (
        f"group error against the champion {difference.render(4)} over {paired.height:,} "
        "member-check rows (refused when the 95% interval is above 0)"
    )


def decide(
    client: MlflowClient, config: MlflowConfig, judging: BacktestConfig, candidate: Candidate
) -> GateDecision:
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
    unusable = _unusable_champion(champion, candidate, alias)
    if unusable is not None:
        return unusable
    try:
        theirs = _champion_answers(config, champion, PREDICTIONS_ARTIFACT)
    except Exception as error:  # its predictions are gone: no automatic decision
        if not registry_reachable(config.tracking_uri):
            raise  # an outage, not a missing file: the gate waits for the server
        version = str(champion.version)
        logger.warning("champion v%s's held-out predictions could not be read: %s", version, error)
        return GateDecision(
            False,
            f"champion v{version}'s held-out predictions could not be read ({error}); "
            f"@{alias} not moved (move it by hand if intended)",
            version,
            None,
        )
    return _compared(config, judging, champion, candidate, theirs)


def _unusable_champion(
    champion: ModelVersion, candidate: Candidate, alias: str
) -> GateDecision | None:
    """The decision when the champion cannot be compared with the candidate: it reads other
    inputs, it was never refit, or it read another weather source; None when it can."""
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
    return None


def _compared(
    config: MlflowConfig,
    judging: BacktestConfig,
    champion: ModelVersion,
    candidate: Candidate,
    theirs: pl.DataFrame,
) -> GateDecision:
    """The decision on the held-out rows both answered: AUC beyond noise, and no worse by
    member group beyond noise."""
    version, alias = str(champion.version), config.champion_alias
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
    group_difference, by_group = _group_verdict(config, judging, champion, candidate)
    worse_by_group = group_difference is not None and group_difference.low > 0
    verdict = "beats" if difference.low > 0 else "does not beat"
    same = champion.tags.get(TAG_TEST_DIGEST) == candidate.test_digest
    basis = (
        "on the same test split, held out by both"
        if same
        else "on the test rows both held out (the records moved on)"
    )
    reason = (
        f"held-out AUC difference against champion v{version} {difference.render(4)} over "
        f"{paired.height:,} rows: {verdict} it beyond noise (promoted only when the 95% "
        f"interval is above 0; {basis}; test split {candidate.test_digest[:12]}); {by_group}"
        + ("; refused: worse calibrated by member group beyond noise" if worse_by_group else "")
    )
    promoted = difference.low > 0 and not worse_by_group
    return GateDecision(promoted, reason, version, difference, group_difference)


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
    if decision.group_difference is not None:
        tags |= {
            "group_error_difference": repr(decision.group_difference.estimate),
            "group_error_difference_ci_low": repr(decision.group_difference.low),
            "group_error_difference_ci_high": repr(decision.group_difference.high),
        }
    for key, value in tags.items():
        client.set_model_version_tag(name, candidate.version, key, value)
    headline = f"@{alias}" if decision.promoted else "challenger (not champion)"
    client.update_model_version(
        name, candidate.version, description=f"{headline}: {decision.reason}"
    )
    logger.info("model %s v%s: %s", name, candidate.version, decision.reason)


def not_the_trained_model(
    client: MlflowClient, config: MlflowConfig, candidate: Candidate
) -> str | None:
    """Why the candidate's version, loaded from the registry, is not the model trained (None
    when it is): marked unverified, its files not the ones registered or trained, or its
    answers to the trained model's test rows not the trained model's."""
    name, version = config.registered_model, candidate.version
    tags = dict(client.get_model_version(name, version).tags)
    try:
        local = verified_copy(config.tracking_uri, RegisteredVersion(name, version, tags))
    except ModelFilesChanged as refused:
        return str(refused)
    trained = candidate.trained
    try:
        stored = files_digest(local / ARTIFACT_PATH)
        if stored != trained.files_digest:
            return (
                f"{name} v{version}: its stored files' sha256 is {stored[:12]}, the trained "
                f"files' {trained.files_digest[:12]}"
            )
        served = mlflow.pyfunc.load_model(str(local)).predict(trained.request)
    finally:
        shutil.rmtree(local, ignore_errors=True)
    probabilities = served["probability"].to_numpy(dtype=float)
    if not np.allclose(
        probabilities, trained.probabilities, rtol=0, atol=ANSWER_TOLERANCE, equal_nan=True
    ):
        gap = np.nanmax(np.abs(probabilities - trained.probabilities))
        return (
            f"{name} v{version} loaded from the registry answers {len(probabilities)} test rows "
            f"up to {gap:.3g} away from the trained model (at most {ANSWER_TOLERANCE:g} allowed)"
        )
    return None


def gate(
    client: MlflowClient, config: MlflowConfig, judging: BacktestConfig, candidate: Candidate
) -> GateDecision:
    """Check that the version loads as the model trained, decide and record; the candidate's
    facts and answers are kept first so that a later gate can compare with it. `judging`: the
    member groups' threshold. Each step waits out a short MLflow outage."""
    version = candidate.version
    when_tracking_answers(
        config, f"gate of v{version}: its facts", lambda: keep_facts(client, config, candidate)
    )
    refusal = when_tracking_answers(
        config,
        f"gate of v{version}: loading it",
        lambda: not_the_trained_model(client, config, candidate),
    )
    if refusal is None:
        decision = when_tracking_answers(
            config, f"gate of v{version}: comparing it with the champion",
            lambda: decide(client, config, judging, candidate),
        )  # fmt: skip
    else:
        decision = GateDecision(
            False, f"not the model trained: {refusal}; never @{config.champion_alias}", None, None
        )
    when_tracking_answers(
        config, f"gate of v{version}: recording its decision",
        lambda: record_decision(client, config, candidate, decision),
    )  # fmt: skip
    return decision


def keep_facts(client: MlflowClient, config: MlflowConfig, candidate: Candidate) -> None:
    """The candidate's facts as tags, and its answers on held-out rows in its run: what a later
    gate compares with."""
    name = config.registered_model
    for key, value in (
        (TAG_TEST_DIGEST, candidate.test_digest),
        (TAG_WEATHER_SOURCE, candidate.weather_source),
        (TAG_KNOWN_BY, candidate.inputs_known_by.value),
        (TAG_TRAINED_THROUGH, candidate.trained_through),
    ):
        client.set_model_version_tag(name, candidate.version, key, value)
    run_id = client.get_model_version(name, candidate.version).run_id
    with tempfile.TemporaryDirectory() as folder:
        for artifact, frame in (
            (PREDICTIONS_ARTIFACT, candidate.predictions),
            (MEMBER_PREDICTIONS_ARTIFACT, candidate.member_predictions),
        ):
            path = Path(folder) / Path(artifact).name
            frame.write_parquet(path)
            client.log_artifact(run_id, str(path), str(Path(artifact).parent))
