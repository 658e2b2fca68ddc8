"""The hyperparameter search, deployed as `summit/tune` (the flow is named `summit` like the
training chain, so both deployments sit under one flow in the UI).

It builds the features through the same cached stages as `summit/train` and publishes the
snapshot to the MLflow server (each trial fetches it by URI, on whichever machine), then asks the
Optuna study for trials and runs each one as a flow run of the trial deployment
(`run_deployment`), at most `tune.concurrency` at a time, so the trials spread over every worker
of that deployment's work pool. A trial's flow run tells the study its own result; a flow run
that crashed, failed or never finished (a lost worker) leaves its trial running, and this flow
marks it failed and goes on. Finally the best configuration is saved as a profile and trained,
registered and gated by the training chain itself (`tune.final_deployment`, `summit/train` by
default), which hands the snapshot to its training flow run by URI as well.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import FlowRun
from prefect.deployments import arun_deployment, run_deployment
from prefect.states import Cancelling

from deepsummit.core.config import Settings, deep_merge
from deepsummit.core.errors import PipelineError
from deepsummit.core.options import RunOptions
from deepsummit.flows.runner import run_tags
from deepsummit.flows.stages import FEATURES, INGEST, WEATHER
from deepsummit.flows.summit import start_chain
from deepsummit.flows.training import training_flow_run_id
from deepsummit.flows.trial import with_study_storage

TUNE_ARTIFACT = "deepsummit-tune"


def _failure(flow_run: FlowRun, timeout_s: float) -> str | None:
    """Why a trial's flow run did not deliver a result, or None when it completed."""
    state = flow_run.state
    if state is not None and state.is_completed():
        return None
    if state is None or not state.is_final():
        return f"flow run {flow_run.name} not finished after {timeout_s:.0f} s (worker lost?)"
    return f"flow run {flow_run.name} {state.name}: {state.message or 'no message'}"


async def _search(
    settings: Settings, study: Any, parameters: dict[str, Any], parent_run_id: str
) -> dict[int, str]:
    """Run trials until the study holds `tune.n_trials`; trial number → its flow run id."""
    from deepsummit.train import tuning

    logger = get_run_logger()
    tune = settings.tune
    space = tuning.search_space(settings.tune)
    uid = tuning.study_uid(study)

    async def launch(number: int) -> FlowRun:
        # The idempotency key makes a resumed search find a trial's existing flow run
        # (and wait for it) instead of starting the trial a second time.
        return await arun_deployment(
            tune.training_deployment,
            parameters={**parameters, "trial_number": number, "parent_run_id": parent_run_id},
            flow_run_name=f"{study.study_name}-trial-{number}",
            timeout=tune.trial_timeout_s,
            poll_interval=tune.poll_interval_s,
            idempotency_key=f"tune-{uid}-{number}",
            tags=["deepsummit", "tune"],
        )

    resumed = tuning.running_trials(study)
    if resumed:
        logger.info("resuming trials %s of study %s", resumed, study.study_name)
    pending = {asyncio.create_task(launch(n)): n for n in resumed}
    to_ask = tuning.trials_to_ask(study, tune.n_trials)
    flow_runs: dict[int, str] = {}
    while pending or to_ask:
        while to_ask and len(pending) < tune.concurrency:
            number = study.ask(space).number
            to_ask -= 1
            pending[asyncio.create_task(launch(number))] = number
            logger.info("trial %d: %s", number, tuning.find_trial(study, number).params)
        done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            number = pending.pop(task)
            flow_run = task.result()  # an API error stops the search; a rerun resumes it
            flow_runs[number] = str(flow_run.id)
            failure = _failure(flow_run, tune.trial_timeout_s)
            if failure and not (flow_run.state and flow_run.state.is_final()):
                async with get_client() as client:  # the worker, if alive, stops it
                    await client.set_flow_run_state(flow_run.id, Cancelling(message=failure))
            trial = tuning.settle_trial(settings, study, number, failure)
            logger.info(
                "trial %d %s: value %s (flow run %s)",
                number, trial.state.name, trial.value, flow_run.name,
            )  # fmt: skip
    return flow_runs


def _register_best(
    settings: Settings, profile: str | None, overrides: dict[str, Any], params: dict[str, Any]
) -> FlowRun:
    """Train, register and gate the best configuration through the training deployment."""
    from deepsummit.train.tuning import hyperparameter_overrides

    final = run_deployment(
        settings.tune.final_deployment,
        parameters={
            "profile": profile,
            "overrides": deep_merge(overrides, hyperparameter_overrides(params)),
        },
        flow_run_name=f"{settings.tune.study_name}-best",
        poll_interval=settings.tune.poll_interval_s,
        tags=["deepsummit", "tune"],
    )
    if not (final.state and final.state.is_completed()):
        state = final.state.name if final.state else "unknown"
        raise PipelineError(
            f"{settings.tune.final_deployment}: flow run {final.name} of the best configuration"
            f" ended {state}: {final.state.message if final.state else ''}"
        )
    return final


def _best_registered(
    settings: Settings,
    profile: str | None,
    overrides: dict[str, Any],
    parent_run_id: str,
    best: Any,
) -> tuple[FlowRun | None, dict[str, str]]:
    """The best trial's registration: by an earlier run of this search (no flow run: nothing is
    trained again), else by the training deployment now; its flow run and the facts of its
    final training."""
    from deepsummit.train import tuning

    facts = tuning.registered_final_run(settings.mlflow, parent_run_id, best.number)
    if facts:
        get_run_logger().info(
            "trial %d, still the best, is registered as version %s by an earlier run of"
            " this search: nothing to train",
            best.number, facts["model_version"],
        )  # fmt: skip
        return None, facts
    final = _register_best(settings, profile, overrides, best.params)
    trained_by = training_flow_run_id(final)
    return final, tuning.adopt_final_run(settings.mlflow, parent_run_id, trained_by, best.number)


@flow(name="summit", log_prints=True)
def tune(
    profile: str | None = None,
    options: RunOptions | None = None,
    overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Search the spec's hyperparameter space with Optuna, one flow run per trial; register the
    best configuration through summit/train's champion gate and save it as the tuned profile (a
    rerun whose best trial an earlier run registered trains nothing again).

    Args:
        profile: settings profile the trials start from (cpu, base, tiny); blank = the default.
        options: per-run options; for the search n_trials (trials the study should hold when
            done; a rerun only runs the rest), concurrency (trials in flight at once = workers of
            the pool), study_name, storage_url (without a password), storage_secret (the
            Prefect Secret block holding a URL with one), search_space; blank = from config.
        overrides: any other settings, nested as in deepsummit.toml.
    """
    from deepsummit.train import tuning
    from deepsummit.train.snapshot_store import publish_snapshot

    merged = (options or RunOptions()).overrides(overrides)
    chain = start_chain(profile, None, merged)
    settings = with_study_storage(chain.settings)
    for stage in (INGEST, WEATHER):
        chain.run_stage(stage)
    # The snapshot every trial trains on, published for workers on other machines.
    snapshot = publish_snapshot(settings.mlflow, chain.run_stage(FEATURES).directory)

    study = tuning.open_study(settings)
    parent_run_id = tuning.open_parent_run(settings, study, run_tags(settings))
    facts: dict[str, str] = {}
    try:
        trial_parameters = {
            "profile": profile,
            "overrides": merged,
            "snapshot_uri": snapshot.uri,
            "snapshot_digest": snapshot.digest,
        }
        flow_runs = asyncio.run(_search(settings, study, trial_parameters, parent_run_id))
        best = tuning.best_trial(study)
        profile_file = tuning.save_profile(settings, best, study.study_name)
        final, facts = _best_registered(settings, profile, merged, parent_run_id, best)
    except BaseException:
        tuning.close_parent_run(settings.mlflow, parent_run_id, study, facts, failed=True)
        raise
    tuning.close_parent_run(settings.mlflow, parent_run_id, study, facts, failed=False)

    summary = _summary(settings, study, best, profile_file, parent_run_id, flow_runs, final, facts)
    create_markdown_artifact(
        key=TUNE_ARTIFACT,
        markdown=_summary_markdown(study, summary, tuning.trials_markdown(study)),
        description="Trials of the hyperparameter search and the registered best configuration",
    )
    return summary


def _summary(
    settings: Settings,
    study: Any,
    best: Any,
    profile_file: Path,
    parent_run_id: str,
    flow_runs: dict[int, str],
    final: FlowRun | None,
    facts: dict[str, str],
) -> dict[str, Any]:
    """What the search returns: the study, the best trial, where its profile and runs are."""
    from deepsummit.train import tuning

    return {
        "study": study.study_name,
        "storage": tuning.storage_description(settings.tune),
        "best_trial": best.number,
        "best_val_auc": best.value,
        "best_params": best.params,
        "profile": str(profile_file),
        "mlflow_parent_run_id": parent_run_id,
        "trial_flow_runs": {str(k): v for k, v in sorted(flow_runs.items())},
        # None where the best trial was registered by an earlier run of this search.
        "final_flow_run_id": str(final.id) if final else None,
        **facts,
    }


def _summary_markdown(study: Any, summary: dict[str, Any], trials: str) -> str:
    return "\n".join(
        [
            f"# Hyperparameter search `{study.study_name}`",
            "",
            f"Best: trial {summary['best_trial']}, validation AUC {summary['best_val_auc']:.4f};"
            f" saved as profile `{Path(summary['profile']).stem}` ({summary['profile']}).",
            f"Registered as version {summary.get('model_version', '?')}: "
            f"{summary.get('champion_decision', '?')} — {summary.get('champion_reason', '')}",
            "",
            trials,
        ]
    )
