"""The per-run options: a study URL holding a password is refused as a run parameter (Prefect
would keep it in the flow run and pass it on to every trial), without repeating it."""

from __future__ import annotations

import pytest

from deepsummit.core.errors import BadInput
from deepsummit.core.options import RunOptions

WITH_PASSWORD = "postgresql://optuna:hunter2@db:5432/optuna"


def test_a_storage_url_option_with_a_password_is_refused_without_repeating_it():
    with pytest.raises(BadInput, match=r"tune\.storage_secret") as refused:
        RunOptions(storage_url=WITH_PASSWORD)
    assert "hunter2" not in str(refused.value)


def test_a_storage_url_override_with_a_password_is_refused():
    with pytest.raises(BadInput, match=r"tune\.storage_url"):
        RunOptions(n_trials=2).overrides({"tune": {"storage_url": WITH_PASSWORD}})


def test_a_storage_url_without_a_password_and_a_secret_name_are_run_parameters():
    options = RunOptions(storage_url="postgresql://optuna@db/optuna", storage_secret="tune-db")
    assert options.overrides() == {
        "tune": {"storage_url": "postgresql://optuna@db/optuna", "storage_secret": "tune-db"}
    }
