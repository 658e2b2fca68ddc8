"""When each model input becomes known: no decision-time model reads anything recorded after
the climb, and the model card's table (docs/model-card.md) is the declaration's."""

from __future__ import annotations

import pytest

from deepsummit.core.config import available_profiles, load_settings
from deepsummit.core.inputs import (
    INPUTS_BY_NAME,
    OUTCOME_COLUMNS,
    TABULAR_INPUTS,
    InputSet,
    Known,
)
from deepsummit.core.sections import PROJECT_ROOT

RETROSPECTIVE = "retrospective"


@pytest.mark.parametrize("profile", [p for p in available_profiles() if p != RETROSPECTIVE])
def test_no_decision_time_profile_reads_an_input_known_after_the_climb(profile: str) -> None:
    inputs = load_settings(profile).features.model_inputs()
    late = [n for n in inputs.names if INPUTS_BY_NAME[n].known is Known.AFTER_CLIMB]
    assert late == []
    assert not OUTCOME_COLUMNS & set(inputs.names)
    assert inputs.latest_known is not Known.AFTER_CLIMB


def test_a_post_climb_input_is_refused_unless_the_model_is_retrospective() -> None:
    with pytest.raises(ValueError, match="oxygen_used: known only after the climb"):
        load_settings(overrides={"features": {"extra_inputs": ["oxygen_used"]}})
    analysis = load_settings(
        overrides={"features": {"extra_inputs": ["oxygen_used"], "retrospective": True}}
    )
    assert analysis.features.model_inputs().latest_known is Known.AFTER_CLIMB


def test_the_retrospective_profile_is_labelled_and_registers_apart() -> None:
    settings = load_settings(RETROSPECTIVE)
    assert settings.features.retrospective
    assert "oxygen_used" in settings.features.model_inputs().names
    assert settings.mlflow.registered_model != load_settings().mlflow.registered_model


def test_the_spec_profile_has_the_model_spec_s_20_tokens() -> None:
    spec = InputSet.of([i.name for i in TABULAR_INPUTS if i.spec])
    assert (len(spec.numeric), len(spec.categorical), len(spec.binary)) == (8, 6, 6)
    assert all(INPUTS_BY_NAME[n].known is Known.BEFORE_DEPARTURE for n in spec.names)


def test_the_model_card_shows_when_each_input_is_known() -> None:
    card = (PROJECT_ROOT / "docs" / "model-card.md").read_text()
    for feature in TABULAR_INPUTS:
        row = f"| `{feature.name}` | {feature.kind} | {feature.known.value} |"
        assert row in card, row
