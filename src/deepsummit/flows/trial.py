"""One trial of the hyperparameter search as its own flow run (deployment `summit-trial/trial`),
so that `summit/tune` spreads trials over every worker of the training work pool.

The trial's hyperparameters come from the study (looked up by number), not from the flow's
parameters: the study is the one record of what each trial is.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from prefect import flow
from prefect.blocks.system import Secret

from deepsummit.core.config import Settings, load_settings
from deepsummit.core.errors import BadInput
from deepsummit.flows.runner import run_tags
from deepsummit.flows.training import fetched_snapshot


def with_study_storage(settings: Settings) -> Settings:
    """The settings with the study URL of the Prefect Secret block `tune.storage_secret` (when
    set), read by each flow run of the search itself: a URL with a password never travels as a
    flow run parameter, where Prefect would keep it for anyone to read."""
    name = settings.tune.storage_secret
    if name is None:
        return settings
    try:
        url = Secret.load(name).get()
    except ValueError:  # what Prefect raises for a block that does not exist
        raise BadInput(
            f"tune.storage_secret: no Prefect Secret block named {name!r} on the Prefect server"
        ) from None
    tune = settings.tune.model_copy(update={"storage_url": url})
    return settings.model_copy(update={"tune": tune})


@flow(name="summit-trial", log_prints=True)
def trial(
    trial_number: int,
    snapshot_uri: str,
    snapshot_digest: str,
    parent_run_id: str,
    profile: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Train trial `trial_number` of the study named in the settings (tune.study_name,
    tune.storage_url, or the Secret block tune.storage_secret) and tell the study its
    validation AUC.

    Args:
        trial_number: the trial's number in the study (asked for by summit/tune).
        snapshot_uri: where summit/tune published its features snapshot (fetched into this
            worker's cache).
        snapshot_digest: the sha256 of the snapshot's files; a download of other files is
            refused.
        parent_run_id: the search's MLflow run; this trial logs as its child.
        profile: settings profile of deepsummit.toml the search runs with.
        overrides: the search's settings overrides, nested as in deepsummit.toml.
    """
    from deepsummit.train.trial import run_trial  # torch and MLflow load only when a trial runs

    settings = with_study_storage(load_settings(profile, overrides or {}))
    snapshot = fetched_snapshot(settings, snapshot_uri, snapshot_digest)
    outcome = run_trial(settings, snapshot, trial_number, parent_run_id, run_tags(settings))
    print(f"trial {outcome.number}: {outcome.state}, validation AUC {outcome.value:.4f}")
    return asdict(outcome)
