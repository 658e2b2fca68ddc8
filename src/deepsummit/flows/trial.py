"""One trial of the hyperparameter search as its own flow run (deployment `summit-trial/trial`),
so that `summit/tune` spreads trials over every worker of the training work pool.

The trial's hyperparameters come from the study (looked up by number), not from the flow's
parameters: the study is the one record of what each trial is.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from prefect import flow

from deepsummit.core.config import load_settings
from deepsummit.flows.runner import run_tags


@flow(name="summit-trial", log_prints=True)
def trial(
    trial_number: int,
    features_dir: str,
    parent_run_id: str,
    profile: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Train trial `trial_number` of the study named in the settings (tune.study_name,
    tune.storage_url) and tell the study its validation AUC.

    Args:
        trial_number: the trial's number in the study (asked for by summit/tune).
        features_dir: the features folder built by summit/tune (readable by this worker).
        parent_run_id: the search's MLflow run; this trial logs as its child.
        profile: settings profile of deepsummit.toml the search runs with.
        overrides: the search's settings overrides, nested as in deepsummit.toml.
    """
    from deepsummit.train.trial import run_trial  # torch and MLflow load only when a trial runs

    settings = load_settings(profile, overrides or {})
    outcome = run_trial(
        settings, Path(features_dir), trial_number, parent_run_id, run_tags(settings)
    )
    print(f"trial {outcome.number}: {outcome.state}, validation AUC {outcome.value:.4f}")
    return asdict(outcome)
