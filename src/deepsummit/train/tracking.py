"""What a training run writes to MLflow besides the model: parameters, per-epoch metrics, plots,
the links a person follows, and the code version."""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import TypeVar

import mlflow
from mlflow import ActiveRun

from deepsummit.contracts.champion import registry_reachable
from deepsummit.core.errors import ServiceUnavailable
from deepsummit.core.sections import PROJECT_ROOT, MlflowConfig, TrainConfig, is_url
from deepsummit.model.config import ModelConfig
from deepsummit.train.checkpoint import EpochRecord
from deepsummit.train.plots import plot_learning_curve

logger = logging.getLogger(__name__)

# The `kind` tag of a training run (drift reports log runs of their own to the experiment).
TRAINING_RUN = "training"

T = TypeVar("T")


def git_commit() -> str:
    try:
        result = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True
        )
    except OSError:
        return "unknown"
    return result.stdout.strip() if result.returncode == 0 else "unknown"


def ui_links(
    tracking_uri: str, experiment_id: str, run_id: str, name: str, version: str
) -> tuple[str, str]:
    """(run page, model version page) in the MLflow UI when tracking through a server; the
    MLflow URIs otherwise."""
    if is_url(tracking_uri):
        base = tracking_uri.rstrip("/")
        return (
            f"{base}/#/experiments/{experiment_id}/runs/{run_id}",
            f"{base}/#/models/{name}/versions/{version}",
        )
    return f"runs:/{run_id}", f"models:/{name}/{version}"


def bound_requests(config: MlflowConfig) -> None:
    """MLflow's retries of one request, as configured (an environment variable set by the user
    wins: MLflow reads it at each request)."""
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", str(config.request_retries))


def wait_for_tracking(config: MlflowConfig, during: str, poll_s: float = 2.0) -> None:
    """Return at once while the tracking server answers. Else say so in one log line, naming
    it, and wait up to `config.unreachable_wait_s` for it; then fail with one line."""
    uri = config.tracking_uri
    if registry_reachable(uri):
        return
    logger.warning(
        "MLflow tracking server %s is not answering (%s); waiting up to %.0f s for it",
        uri, during, config.unreachable_wait_s,
    )  # fmt: skip
    deadline = time.monotonic() + config.unreachable_wait_s
    while time.monotonic() < deadline:
        time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))
        if registry_reachable(uri):
            logger.info("MLflow tracking server %s answers again", uri)
            return
    raise ServiceUnavailable(
        f"MLflow tracking server {uri} did not answer for {config.unreachable_wait_s:.0f} s "
        f"({during}); the checkpoints are kept: rerun once it is up to resume"
    )


def when_tracking_answers(config: MlflowConfig, during: str, step: Callable[[], T]) -> T:
    """`step` (MLflow calls that may be repeated) once the tracking server answers
    (`wait_for_tracking`), and again when it failed because the server stopped answering
    meanwhile: a short outage is waited out, a longer one fails in one line. An error while
    the server answers is the step's own: raised as is."""
    while True:
        wait_for_tracking(config, during)
        try:
            return step()
        except Exception:
            if registry_reachable(config.tracking_uri):
                raise


@contextmanager
def training_run(tags: dict[str, str]) -> Iterator[ActiveRun]:
    """An MLflow run (with system metrics) that ends FAILED on an error. When the tracking
    server is gone by then, the error raised is still the one that says why, not the failed
    attempt to mark the run."""
    run = mlflow.start_run(tags=tags, log_system_metrics=True)
    try:
        yield run
    except BaseException:
        _end_failed(run.info.run_id)
        raise
    mlflow.end_run()


# Marking a run FAILED on a tracking server that does not answer: one short attempt, not
# MLflow's retries (3 with doubling backoff: 14 s more before the stage says what it knows).
_ONE_ATTEMPT = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "5"}


def _end_failed(run_id: str) -> None:
    """End the active run as FAILED, or say in one line that it could not be marked."""
    answering = registry_reachable(mlflow.get_tracking_uri())
    saved = {name: os.environ.get(name) for name in _ONE_ATTEMPT}
    if not answering:
        os.environ.update(_ONE_ATTEMPT)  # MLflow reads them at each request
    try:
        mlflow.end_run("FAILED")
    except Exception:
        logger.warning("MLflow run %s could not be marked FAILED", run_id)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def guarded_epoch_log(config: MlflowConfig) -> Callable[[EpochRecord, str], None]:
    """`log_epoch`, when the tracking server answers (`when_tracking_answers`)."""

    def log(record: EpochRecord, prefix: str = "") -> None:
        seed = prefix.replace("_", " ").strip()  # "seed_42_" → "seed 42"
        during = f"{seed}, epoch {record.epoch}" if seed else f"epoch {record.epoch}"
        when_tracking_answers(config, during, lambda: log_epoch(record, prefix))

    return log


def log_epoch(record: EpochRecord, prefix: str = "") -> None:
    """One epoch's metrics in the active run, at step = epoch (`prefix` tells seeds apart); a
    training judged on nothing (a refit) logs no validation figures rather than NaN."""
    values = asdict(record)
    step = values.pop("epoch")
    values["epoch_seconds"] = values.pop("seconds")
    mlflow.log_metrics(
        {f"{prefix}{name}": value for name, value in values.items() if not math.isnan(value)},
        step=step,
    )


def training_params(
    profile: str,
    architecture: ModelConfig,
    train_config: TrainConfig,
    rows: dict[str, int],
    dimensions: dict[str, object],
    inputs: tuple[str, ...],
) -> dict[str, object]:
    knobs = {k: v for k, v in asdict(architecture).items() if k not in ModelConfig.INPUT_DIMENSIONS}
    params: dict[str, object] = {f"model.{k}": v for k, v in knobs.items()}
    train = train_config.model_dump(exclude=set(TrainConfig.OPERATIONAL))
    params |= {f"train.{k}": v for k, v in train.items()}
    params |= {f"rows.{split}": count for split, count in rows.items()}
    params["profile"] = profile
    params["categorical_cardinalities"] = json.dumps(dimensions["categorical_cardinalities"])
    params["inputs"] = ",".join(inputs)
    return params


def log_plots(directory: Path, drawn: list[Path], history: tuple[EpochRecord, ...]) -> None:
    """Plots already drawn into `directory`, and the learning curve, logged under plots/."""
    curve = plot_learning_curve(history, directory / "learning_curve.png")
    for path in (*drawn, curve):
        mlflow.log_artifact(str(path), artifact_path="plots")
