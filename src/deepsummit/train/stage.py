"""The train stage: features snapshot → the recipe judged as it is served, then the model that
recipe trains on every season, registered and gated.

One MLflow run per call: parameters, per-epoch metrics (live), the snapshot as a dataset input.
Every check answers with the recipe as served: trained on every season before the seasons it
answers, through the calibration map the member check fits (deepsummit/train/recipe.py).

1. The member check: the recipe trained on the years before the newest seasons of members' own
   records (before the test split), answering those members. The map is fitted there; the
   answers are judged member group by member group (deepsummit/train/member_groups.py).
2. The test split (the newest seasons): the recipe trained on every season before it, against
   the baselines trained on the same rows, with bootstrap intervals over expeditions
   (deepsummit/train/evaluation.py).
3. The refit: the recipe trained on every season of the snapshot, through the newest: the model
   registered (deepsummit/contracts/artifact.py), with the map of step 1. It trains beside
   steps 1 and 2 in a process of its own when the recipe keeps its last epoch
   (deepsummit/train/parallel.py). Where the member check chose a blend of the transformer and
   the best tree (deepsummit/train/blending.py), that tree is refit on every season too, and
   the version serves both.
4. The gate compares recipes on held-out rows: the test split's answers and the member check's
   against the champion's own (deepsummit/train/registry.py), never a model on rows it learnt
   from.
"""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path

import mlflow
import pandas as pd
import polars as pl
from mlflow import ActiveRun, MlflowClient
from mlflow.data.sources import LocalArtifactDatasetSource

from deepsummit.contracts.artifact import ARTIFACT_NAME, ModelArtifact
from deepsummit.contracts.blend import Blend
from deepsummit.contracts.calibration import Calibrator
from deepsummit.contracts.champion import set_experiment
from deepsummit.contracts.member_groups import MEMBER_COLUMNS
from deepsummit.contracts.preprocessing import Preprocessor
from deepsummit.contracts.snapshot import (
    PLANNED_TEST_FILE,
    PREPROCESSING_FILE,
    SNAPSHOT_FILE,
    load_history,
    read_features,
    read_windows,
)
from deepsummit.contracts.training_lease import Lease
from deepsummit.core.config import Settings
from deepsummit.core.context import REGISTRY, RunContext
from deepsummit.core.planned import KEY_COLUMNS
from deepsummit.core.warehouse import frame_digest
from deepsummit.drift.monitor import training_profile
from deepsummit.train.baseline_protocol import baseline_seeds
from deepsummit.train.blending import refit_trees
from deepsummit.train.checkpoint_store import discard_uploads
from deepsummit.train.comparison import TRANSFORMER
from deepsummit.train.evaluation import Evaluation, HeldOut, evaluate
from deepsummit.train.member_groups import ALL_PEAKS
from deepsummit.train.parallel import Trained, train_recipe
from deepsummit.train.recipe import MemberCheck, Recipe, Refit, training_arrays
from deepsummit.train.registration import Registered, log_and_register
from deepsummit.train.registry import Candidate, GateDecision, gate
from deepsummit.train.report import TrainReport
from deepsummit.train.tracking import (
    TRAINING_RUN,
    bound_requests,
    git_commit,
    guarded_epoch_log,
    training_params,
    training_run,
    ui_links,
    wait_for_tracking,
)
from deepsummit.train.trainer import checkpoint_signature

EXAMPLE_ROWS = 3


@dataclass(frozen=True)
class TrainingData:
    """A features snapshot as the train stage reads it."""

    directory: Path
    preprocessor: Preprocessor  # the snapshot's: its settings are every training's
    snapshot: pl.DataFrame  # every attempt with its split (features.parquet)
    windows: pl.DataFrame  # their weather windows
    digest: str  # of the whole snapshot table
    test_digest: str  # of its test rows: what the gate compares on

    @classmethod
    def read(cls, directory: Path) -> TrainingData:
        snapshot = read_features(directory)
        return cls(
            directory,
            Preprocessor.load(directory / PREPROCESSING_FILE),
            snapshot,
            read_windows(directory),
            frame_digest(snapshot),
            frame_digest(snapshot.filter(pl.col("split") == "test")),
        )

    def split(self, name: str) -> pl.DataFrame:
        return self.snapshot.filter(pl.col("split") == name)


def train_and_register(
    settings: Settings, context: RunContext, features_snapshot: Path
) -> TrainReport:
    """Judge the recipe as served, train it on every season, register and gate."""
    data = TrainingData.read(features_snapshot)
    checkpoints = checkpoint_folder(settings, data)
    bound_requests(settings.mlflow)
    wait_for_tracking(settings.mlflow, "before training")
    set_experiment(settings.mlflow.tracking_uri, settings.mlflow.experiment)
    with training_run(run_tags(settings, context, data)) as run:
        log_inputs(settings, data)
        trained = train_recipe(
            Recipe.of(settings, upload_checkpoints=True), settings.baselines, data.directory,
            data.snapshot,
            data.windows, data.preprocessor, checkpoints, context.progress,
            guarded_epoch_log(settings.mlflow),
        )  # fmt: skip
        # The map the registered model carries, fitted once on the whole member check.
        calibrator = trained.check.calibrator(settings.train)
        evaluation = evaluate(
            HeldOut(data.split("test"), trained.test),
            trained.newest.results,
            trained.baselines,
            trained.check,
            calibrator,
            settings.train,
            settings.backtest,
            context.run_dir,
            settings.baselines.served,
        )
        served = trained.served
        mlflow.log_params({"trained_through": served.trained_through, "rows.refit": served.rows})
        artifact = model_artifact(
            data, served, calibrator, evaluation, served_blend(settings, data, trained, evaluation)
        )
        registered = log_and_register(
            settings.mlflow,
            artifact.save(context.run_dir / ARTIFACT_NAME),
            planned_example(data),
            artifact,
            Lease.parse(settings.train.lease),
        )
        decision = gate_version(settings, context, data, registered, trained, evaluation)
    # The model is safe in the registry now: its checkpoints, here and uploaded, can go.
    shutil.rmtree(checkpoints, ignore_errors=True)
    discard_uploads(settings.mlflow, checkpoints.name)
    return train_report(
        settings, data, trained, calibrator, evaluation, decision, run, registered.version
    )


def train_report(
    settings: Settings,
    data: TrainingData,
    trained: Trained,
    calibrator: Calibrator,
    evaluation: Evaluation,
    decision: GateDecision,
    run: ActiveRun,
    version: str,
) -> TrainReport:
    run_url, model_url = ui_links(
        settings.mlflow.tracking_uri,
        run.info.experiment_id,
        run.info.run_id,
        settings.mlflow.registered_model,
        version,
    )
    served = trained.served
    return TrainReport(
        mlflow_run_id=run.info.run_id,
        experiment_id=run.info.experiment_id,
        model_name=settings.mlflow.registered_model,
        model_version=version,
        champion=decision.promoted,
        decision_reason=decision.reason,
        evaluation=evaluation,
        tracking_uri=settings.mlflow.tracking_uri,
        run_url=run_url,
        model_url=model_url,
        weather_source=data.preprocessor.weather_source,
        digest=data.digest,
        test_digest=data.test_digest,
        rows=_rows(data, trained),
        member_check_years=trained.check.years,
        calibrator=calibrator,
        seeds=tuple(r.seed for r in served.results),
        epochs=tuple(len(r.history) for r in served.results),
        inputs=data.preprocessor.inputs.names,
        trained_through=served.trained_through,
    )


def _rows(data: TrainingData, trained: Trained) -> dict[str, int]:
    return {
        "test": len(trained.test),
        "before test": trained.newest.rows,
        "member check": trained.check.rows.height,
        "refit": trained.served.rows,
    }


def checkpoint_folder(settings: Settings, data: TrainingData) -> Path:
    """Where this training resumes from after a crash: one folder per snapshot and settings."""
    config = settings.model.with_inputs(data.preprocessor.model_dimensions())
    signature = checkpoint_signature(config, settings.train, data.snapshot.height)
    key = hashlib.sha256(f"{data.digest}:{signature}".encode()).hexdigest()[:16]
    return settings.train.checkpoint_dir / key


def run_tags(settings: Settings, context: RunContext, data: TrainingData) -> dict[str, str]:
    return {
        **context.tags,
        "data_digest": data.digest,
        "test_split_digest": data.test_digest,
        "weather_source": data.preprocessor.weather_source,
        "git_commit": git_commit(),
        "profile": settings.profile,
        "inputs_known_by": data.preprocessor.inputs.latest_known.value,
        "kind": TRAINING_RUN,
    }


def log_inputs(settings: Settings, data: TrainingData) -> None:
    """The run's parameters, and the snapshot as its dataset input (with its digest)."""
    counts = data.snapshot.group_by("split").len()
    mlflow.log_params(
        training_params(
            settings.profile,
            settings.model,
            settings.train,
            dict(counts.iter_rows()),
            data.preprocessor.model_dimensions(),
            data.preprocessor.inputs.names,
        )
    )
    mlflow.log_input(
        mlflow.data.from_polars(
            data.snapshot,
            # An explicit source object: a bare path string matches two resolvers.
            source=LocalArtifactDatasetSource(str(data.directory / SNAPSHOT_FILE)),
            name="features",
            targets="label",
        ),
        context="training",
    )


def served_blend(
    settings: Settings, data: TrainingData, trained: Trained, evaluation: Evaluation
) -> Blend | None:
    """The blend the member check chose, its tree refit on every season as the protocol
    judged it (its rounds, its seeds, its map); None where the transformer answers alone."""
    lead = evaluation.tree_lead
    if lead is None or not lead.blended:
        return None
    tree = next(m for m in trained.baselines if m.name == lead.tree)
    preprocessor = trained.served.preprocessor
    trees = refit_trees(
        lead.tree,
        tree.rounds,
        training_arrays(preprocessor, data.snapshot, data.windows, settings.train),
        preprocessor.categorical_cardinalities,
        settings.baselines,
        settings.train,
        baseline_seeds(settings.baselines, settings.model, settings.train),
    )
    assert tree.calibrator is not None  # every baseline of the protocol has its map
    return Blend(trees, lead.weight, tree.calibrator)


def model_artifact(
    data: TrainingData,
    served: Refit,
    calibrator: Calibrator,
    evaluation: Evaluation,
    blend: Blend | None = None,
) -> ModelArtifact:
    """Everything the registered version needs to score a planned attempt
    (deepsummit/contracts/artifact.py): the refit networks and preprocessing, the map of the
    member check, how the member check judged each member group, the history as of the
    snapshot's records, and every season's inputs as the drift reference."""
    inputs = served.preprocessor.inputs
    return ModelArtifact(
        networks=[r.model for r in served.results],
        seeds=[r.seed for r in served.results],
        preprocessor=served.preprocessor,
        calibrator=calibrator,
        history=load_history(data.directory),
        drift_reference=training_profile(
            data.snapshot,
            data.windows,
            inputs,
            f"every season through {served.trained_through} of features {data.digest[:12]}",
        ),
        member_groups=evaluation.member_groups[ALL_PEAKS].as_json(),
        metadata={
            "weather_source": served.preprocessor.weather_source,
            "inputs": list(inputs.names),
            "inputs_known_by": inputs.latest_known.value,
            "trained_through": served.trained_through,
            "evaluated_on": data.preprocessor.extra["split"],
            "features_digest": data.digest,
            "served": blend.parts if blend is not None else TRANSFORMER,
        },
        blend=blend,
    )


def planned_example(data: TrainingData) -> pd.DataFrame:
    """A few test rows as a user asks for them: the registered model's input example."""
    planned = pl.read_parquet(data.directory / PLANNED_TEST_FILE)
    return planned.head(EXAMPLE_ROWS).drop(KEY_COLUMNS).to_pandas()


def gate_version(
    settings: Settings,
    context: RunContext,
    data: TrainingData,
    registered: Registered,
    trained: Trained,
    evaluation: Evaluation,
) -> GateDecision:
    """The champion gate on the held-out rows: the test split's and the member check's (one
    gate at a time: one champion)."""
    with context.exclusive(REGISTRY):
        decision = gate(
            MlflowClient(settings.mlflow.tracking_uri),
            settings.mlflow,
            settings.backtest,
            Candidate(
                version=registered.version,
                test_digest=data.test_digest,
                weather_source=data.preprocessor.weather_source,
                inputs_known_by=data.preprocessor.inputs.latest_known,
                predictions=data.split("test")
                .select(*KEY_COLUMNS, "label")
                .with_columns(probability=pl.Series(evaluation.served[evaluation.served_model])),
                member_predictions=member_predictions(trained.check, evaluation),
                trained_through=trained.served.trained_through,
                trained=registered.trained,
            ),
        )
    mlflow.set_tags(
        {
            "model_version": registered.version,
            "champion_decision": "promoted" if decision.promoted else "challenger",
            "champion_reason": decision.reason,
            # The gate judges the transformer against its champion; beside it, against the
            # best tree on the same member check.
            **(
                {"member_check_vs_best_tree": evaluation.tree_lead.describe()}
                if evaluation.tree_lead is not None
                else {}
            ),
        }
    )
    return decision


def member_predictions(check: MemberCheck, evaluation: Evaluation) -> pl.DataFrame:
    """The member check's rows with the served model's answer judged there and the columns of
    their groups: what a later gate pairs its own with."""
    return check.rows.select(*KEY_COLUMNS, "peakid", "label", *MEMBER_COLUMNS).with_columns(
        probability=pl.Series(evaluation.served_member_answers)
    )
