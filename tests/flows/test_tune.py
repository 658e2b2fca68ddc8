"""deepsummit/flows/tune.py without a server: how a trial's flow run that delivered no result is
described (the reason the study records for the failed trial)."""

from __future__ import annotations

from uuid import uuid4

from prefect.client.schemas.objects import FlowRun
from prefect.states import Completed, Crashed, Running

from deepsummit.flows.tune import _failure


def _run(state) -> FlowRun:
    return FlowRun(name="e2e-trial-4", flow_id=uuid4(), state=state)


def test_a_completed_trial_run_has_no_failure():
    assert _failure(_run(Completed()), 60) is None


def test_a_crashed_trial_run_names_its_state_and_message():
    reason = _failure(_run(Crashed(message="Process exited with status code: -9")), 60)
    assert reason == "flow run e2e-trial-4 Crashed: Process exited with status code: -9"


def test_a_trial_run_still_running_at_the_timeout_is_a_lost_worker():
    assert _failure(_run(Running()), 3600) == (
        "flow run e2e-trial-4 not finished after 3600 s (worker lost?)"
    )
