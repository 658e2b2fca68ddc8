"""Hyperparameter search (spec Part 7.2) with Optuna: search space, study, pruning, the MLflow
parent run, and the tuned profile; one trial's training is deepsummit/train/trial.py.

Plain Python; deepsummit/flows/tune.py and deepsummit/flows/trial.py only orchestrate. A trial runs
in another process, often on another machine: it finds its trial in the study by number through the
shared storage (a database URL: SQLite locally, PostgreSQL for a pool of workers), reports
validation AUC after every epoch, is pruned there when the median rule says so, and tells the study
its own result, so a result is recorded even when the parent flow dies. The parent marks FAIL
whatever a crashed flow run or a lost worker left running.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import optuna
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution
from optuna.trial import FrozenTrial, TrialState
from sqlalchemy.engine import make_url

from deepsummit.contracts.champion import experiment_named
from deepsummit.core.config import Settings
from deepsummit.core.config import saved_profile_path as profile_path
from deepsummit.core.errors import PipelineError
from deepsummit.core.sections import MlflowConfig, TrainConfig, TuneConfig, resolve_path
from deepsummit.model.config import ModelConfig
from deepsummit.train.tracking import TRAINING_RUN

logger = logging.getLogger(__name__)

# The spec's search space (Part 7.2).
SPEC_SPACE: dict[str, BaseDistribution] = {
    "hidden_size": CategoricalDistribution((128, 256, 512)),
    "num_layers": CategoricalDistribution((4, 6, 8)),
    "num_heads": CategoricalDistribution((4, 8)),
    "dropout": CategoricalDistribution((0.1, 0.2)),
    "drop_path_rate": CategoricalDistribution((0.1, 0.2)),
    "learning_rate": FloatDistribution(1e-5, 1e-3, log=True),
    "weight_decay": CategoricalDistribution((0.01, 0.05, 0.1)),
    "batch_size": CategoricalDistribution((128, 256, 512)),
}
# The settings section each hyperparameter belongs to.
SECTIONS = {
    **{name: "model" for name in ("hidden_size", "num_layers", "num_heads", "dropout")},
    "drop_path_rate": "model",
    **{name: "train" for name in ("learning_rate", "weight_decay", "batch_size")},
}

# Study user attributes, and MLflow tags of the search's runs.
ATTR_UID = "uid"  # names the trials' flow runs (idempotency keys) uniquely across servers
ATTR_PARENT_RUN = "mlflow_parent_run_id"
ATTR_FAILURE = "failure"
TAG_STUDY = "tune.study"
TAG_TRIAL = "tune.trial"
TAG_ROLE = "tune.role"  # search (the parent), trial, final (the registered best configuration)


@dataclass(frozen=True)
class TrialOutcome:
    number: int
    state: str  # COMPLETE or PRUNED (a failure never returns: the parent records it)
    value: float  # best validation AUC (PRUNED: the last reported one)
    epochs: int
    mlflow_run_id: str


# ---------------------------------------------------------------- space and study


def search_space(config: TuneConfig) -> dict[str, BaseDistribution]:
    """The spec's space, with the choices that `tune.search_space` replaces (for small runs)."""
    space = dict(SPEC_SPACE)
    for name, values in config.search_space.items():
        if name not in SPEC_SPACE:
            raise PipelineError(
                f"tune.search_space: unknown hyperparameter {name!r}; known: {', '.join(SECTIONS)}"
            )
        if not values:
            raise PipelineError(f"tune.search_space.{name}: no values")
        if name == "learning_rate":
            if len(values) != 2 or not 0 < values[0] <= values[1]:
                raise PipelineError(
                    f"tune.search_space.learning_rate: want [low, high] with 0 < low <= high, "
                    f"got {values}"
                )
            space[name] = FloatDistribution(float(values[0]), float(values[1]), log=True)
        else:
            space[name] = CategoricalDistribution(tuple(values))
    for hidden in space["hidden_size"].choices:  # type: ignore[attr-defined]
        for heads in space["num_heads"].choices:  # type: ignore[attr-defined]
            if hidden % heads:
                raise PipelineError(
                    f"tune.search_space: hidden_size {hidden} is not divisible by num_heads {heads}"
                )
    return space


def storage_url(config: TuneConfig) -> str:
    """The study storage URL; a relative SQLite path is resolved against the project root."""
    url = config.storage_url
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database:
        return url
    path = resolve_path(parsed.database)
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


def storage_description(config: TuneConfig) -> str:
    """Where the study is, for tags and summaries: the Secret block that holds its URL, or the
    URL with its password masked."""
    if config.storage_secret:
        return f"Prefect Secret {config.storage_secret!r}"
    return make_url(storage_url(config)).render_as_string(hide_password=True)


@functools.lru_cache(maxsize=8)
def _storage(url: str) -> optuna.storages.RDBStorage:
    """One storage (connection pool) per URL and process. SQLite waits for a lock held by
    another process instead of failing at once."""
    engine: dict[str, Any] = {"pool_pre_ping": True}
    if url.startswith("sqlite"):
        engine = {"connect_args": {"timeout": 60}}
    return optuna.storages.RDBStorage(url, engine_kwargs=engine)


def open_study(settings: Settings) -> optuna.Study:
    """Create the study, or load it when it exists (a rerun resumes it)."""
    tune = settings.tune
    url = storage_url(settings.tune)
    study = optuna.create_study(
        study_name=tune.study_name,
        storage=_storage(url),
        direction="maximize",
        load_if_exists=True,
        pruner=optuna.pruners.MedianPruner(
            n_startup_trials=tune.pruner_startup_trials, n_warmup_steps=tune.pruner_warmup_epochs
        ),
    )
    # Seeded per number of trials so far: a resumed search does not replay the first draws.
    # The constant liar keeps concurrent trials from being proposed at the same spot.
    study.sampler = optuna.samplers.TPESampler(
        seed=settings.train.seed + len(study.trials),
        n_startup_trials=tune.sampler_startup_trials,
        constant_liar=True,
    )
    if ATTR_UID not in study.user_attrs:
        study.set_user_attr(ATTR_UID, uuid.uuid4().hex)
    return study


def study_uid(study: optuna.Study) -> str:
    return str(study.user_attrs[ATTR_UID])


def find_trial(study: optuna.Study, number: int) -> FrozenTrial:
    for trial in study.get_trials(deepcopy=False):
        if trial.number == number:
            return trial
    raise PipelineError(f"study {study.study_name!r} has no trial {number}")


def running_trials(study: optuna.Study) -> list[int]:
    """Trials asked for but not finished: left by a search that ended early, to be resumed."""
    return [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]


def trials_to_ask(study: optuna.Study, n_trials: int) -> int:
    """New trials needed so that the study holds `n_trials` finished or running ones."""
    held = study.get_trials(
        deepcopy=False,
        states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL, TrialState.RUNNING),
    )
    return max(0, n_trials - len(held))


def trial_handle(settings: Settings, study: optuna.Study, number: int) -> optuna.Trial:
    """A live trial object for trial `number`, looked up through the shared storage."""
    storage = _storage(storage_url(settings.tune))
    study_id = storage.get_study_id_from_name(study.study_name)
    return optuna.Trial(study, storage.get_trial_id_from_study_id_trial_number(study_id, number))


def hyperparameter_overrides(params: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A trial's parameters as settings overrides ({"model": {...}, "train": {...}})."""
    overrides: dict[str, dict[str, Any]] = {}
    for name, value in params.items():
        overrides.setdefault(SECTIONS[name], {})[name] = value
    return overrides


def with_hyperparameters(settings: Settings, params: dict[str, Any]) -> Settings:
    chosen = hyperparameter_overrides(params)
    model = replace(settings.model, **chosen.get("model", {}))
    train = TrainConfig.model_validate({**settings.train.model_dump(), **chosen.get("train", {})})
    return settings.model_copy(update={"model": model, "train": train})


# ---------------------------------------------------------------- the parent side


def settle_trial(
    settings: Settings, study: optuna.Study, number: int, failure: str | None
) -> FrozenTrial:
    """After the trial's flow run ended: a trial it left running has failed (crash, lost worker,
    timeout) and is marked so with the reason; a trial that told its result keeps it."""
    trial = find_trial(study, number)
    if trial.state == TrialState.RUNNING:
        reason = failure or "its flow run ended without reporting a result"
        trial_handle(settings, study, number).set_user_attr(ATTR_FAILURE, reason)
        study.tell(number, state=TrialState.FAIL)
        logger.warning("trial %d failed: %s", number, reason)
        trial = find_trial(study, number)
    return trial


def best_trial(study: optuna.Study) -> FrozenTrial:
    completed = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not completed:
        counts = {s.name: 0 for s in (TrialState.PRUNED, TrialState.FAIL)}
        for trial in study.get_trials(deepcopy=False):
            counts[trial.state.name] = counts.get(trial.state.name, 0) + 1
        raise PipelineError(
            f"study {study.study_name!r}: no trial completed "
            f"({', '.join(f'{n} {s.lower()}' for s, n in counts.items())}); nothing to register"
        )
    return study.best_trial


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{value} has no TOML form")
    return json.dumps(list(value) if isinstance(value, tuple) else value)


def save_profile(settings: Settings, trial: FrozenTrial, study_name: str) -> Path:
    """The best trial's whole training configuration (its model and train sections) as the
    profile `tune.profile_name`, so that `summit/train` with that profile trains exactly it."""
    tuned = with_hyperparameters(settings, trial.params)
    sections = {
        "model": {
            name: value
            for name, value in asdict(tuned.model).items()
            if name not in ModelConfig.INPUT_DIMENSIONS
        },
        "train": tuned.train.model_dump(exclude=set(TrainConfig.OPERATIONAL)),
    }
    lines = [
        f"# Written by the hyperparameter search (study {study_name!r}, trial {trial.number},",
        f"# validation AUC {trial.value:.4f}), from profile {settings.profile!r}.",
        f"# Train with it: prefect deployment run summit/train -p "
        f"profile={settings.tune.profile_name}",
    ]
    for section, values in sections.items():
        lines += ["", f"[{section}]"]
        lines += [f"{k} = {_toml_value(v)}" for k, v in values.items() if v is not None]
    path = profile_path(settings.tune.profile_name, settings.paths.var_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".toml.partial")
    partial.write_text("\n".join(lines) + "\n")
    os.replace(partial, path)
    return path


def open_parent_run(settings: Settings, study: optuna.Study, tags: dict[str, str]) -> str:
    """The search's MLflow run (one per study: a resumed search reopens it); its id."""
    client = MlflowClient(settings.mlflow.tracking_uri)
    existing = study.user_attrs.get(ATTR_PARENT_RUN)
    if existing:
        try:
            client.update_run(existing, status="RUNNING")
            return str(existing)
        except MlflowException:
            logger.info("parent run %s is not on %s; starting another", existing, client)
    experiment_id = experiment_named(client, settings.mlflow.experiment)
    run = client.create_run(
        experiment_id,
        run_name=f"tune-{study.study_name}",
        tags={**tags, TAG_STUDY: study.study_name, TAG_ROLE: "search"},
    )
    run_id = run.info.run_id
    client.log_dict(
        run_id,
        {name: repr(dist) for name, dist in search_space(settings.tune).items()},
        "search_space.json",
    )
    client.set_tag(run_id, "tune.storage", storage_description(settings.tune))
    study.set_user_attr(ATTR_PARENT_RUN, run_id)
    return run_id


def close_parent_run(
    config: MlflowConfig, run_id: str, study: optuna.Study, facts: dict[str, str], failed: bool
) -> None:
    client = MlflowClient(config.tracking_uri)
    counts = {state: 0 for state in ("COMPLETE", "PRUNED", "FAIL")}
    for trial in study.get_trials(deepcopy=False):
        counts[trial.state.name] = counts.get(trial.state.name, 0) + 1
    for state, count in counts.items():
        client.log_metric(run_id, f"trials_{state.lower()}", count)
    completed = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if completed:
        client.log_metric(run_id, "best_val_auc", study.best_value)
        client.set_tag(run_id, "tune.best_trial", str(study.best_trial.number))
    for key, value in facts.items():
        client.set_tag(run_id, key, value)
    client.set_terminated(run_id, "FAILED" if failed else "FINISHED")


def adopt_final_run(
    config: MlflowConfig, parent_run_id: str, flow_run_id: str, trial_number: int
) -> dict[str, str]:
    """Put the MLflow run of the final training (found by its Prefect flow run id) under the
    search's run; its facts (run id, model version, champion decision). {} when that flow run
    logged none (the reason is logged): a final run this search adopted before, its version
    still registered, is found by `registered_final_run` before anything is trained."""
    client = MlflowClient(config.tracking_uri)
    of_flow_run = f"tags.`prefect.flow_run_id` = '{flow_run_id}'"
    runs = client.search_runs(
        _experiments(client, config), f"{of_flow_run} and tags.kind = '{TRAINING_RUN}'"
    )
    if not runs:
        logger.warning(
            "flow run %s logged no MLflow run (its training was reused from the cache of "
            "an earlier summit/train run): see that flow run for the model version",
            flow_run_id,
        )
        return {}
    run_id = runs[0].info.run_id
    client.set_tag(run_id, "mlflow.parentRunId", parent_run_id)
    client.set_tag(run_id, TAG_ROLE, "final")
    client.set_tag(run_id, TAG_TRIAL, str(trial_number))
    return _final_facts(client.get_run(run_id))


def registered_final_run(
    config: MlflowConfig, parent_run_id: str, trial_number: int
) -> dict[str, str]:
    """The facts of the final training an earlier run of this search adopted for trial
    `trial_number`, while the model version it registered is still in the registry; {} when
    there is none (a resumed search whose best trial is unchanged trains nothing again)."""
    client = MlflowClient(config.tracking_uri)
    runs = client.search_runs(
        _experiments(client, config),
        filter_string=f"tags.`mlflow.parentRunId` = '{parent_run_id}' "
        f"and tags.`{TAG_ROLE}` = 'final' and tags.`{TAG_TRIAL}` = '{trial_number}'",
    )
    if not runs:
        return {}
    facts = _final_facts(runs[0])
    try:
        client.get_model_version(config.registered_model, facts["model_version"])
    except MlflowException:  # deleted since, or never registered: train it again
        return {}
    return facts


def _experiments(client: MlflowClient, config: MlflowConfig) -> list[str]:
    experiment = client.get_experiment_by_name(config.experiment)
    return [experiment.experiment_id] if experiment else []


def _final_facts(run: Any) -> dict[str, str]:
    tags = run.data.tags
    return {
        "final_run_id": run.info.run_id,
        "model_version": tags.get("model_version", ""),
        "champion_decision": tags.get("champion_decision", ""),
        "champion_reason": tags.get("champion_reason", ""),
    }


def trials_markdown(study: optuna.Study) -> str:
    """One row per trial: state, validation AUC, epochs reported, parameters, failure reason."""
    names = list(SECTIONS)
    header = ["trial", "state", "val AUC", "epochs", *names, "note"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for trial in study.get_trials(deepcopy=False):
        value = f"{trial.value:.4f}" if trial.value is not None else ""
        params = [
            f"{trial.params[n]:.2e}" if n == "learning_rate" and n in trial.params else
            str(trial.params.get(n, ""))
            for n in names
        ]  # fmt: skip
        note = str(trial.user_attrs.get(ATTR_FAILURE, ""))
        row = [str(trial.number), trial.state.name, value, str(len(trial.intermediate_values))]
        lines.append("| " + " | ".join([*row, *params, note]) + " |")
    return "\n".join(lines)
