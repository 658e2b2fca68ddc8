"""The pyfunc's refusal of a request it cannot answer whole (deepsummit/serve/model_input.py):
values MLflow's schema check lets through but the model cannot read are found before scoring,
and the refusal is one line naming the rows, a 400 however the scoring server rewrites it.
(Over HTTP, with the model's own reasons: tests/serve/test_model_server.py.)"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from deepsummit.core.inputs import WINDOW_DAYS
from deepsummit.serve.model_input import RefusedRequest, malformed_rows


def _frame(*changes: dict) -> pd.DataFrame:
    row = {
        "peak": "EVER",
        "push_date": "2019-05-20",
        "route": "S Col-SE Ridge",
        "team_size": 8.0,
        "temperature_2m_mean": np.linspace(-20, -10, WINDOW_DAYS),
    }
    return pd.DataFrame([{**row, **change} for change in changes])


def test_text_that_is_not_text_and_infinite_numbers_are_found_per_row() -> None:
    days = np.linspace(-20, -10, WINDOW_DAYS)
    days[12] = math.inf
    frame = _frame({}, {"route": 7}, {"team_size": -math.inf}, {"temperature_2m_mean": days})

    assert malformed_rows(frame) == {
        1: "route 7: not text",
        2: "team_size -inf: not a finite number",
        3: "temperature_2m_mean inf on D-77: not a finite number",
    }


def test_missing_values_null_or_nan_are_not_malformed() -> None:
    days = np.linspace(-20, -10, WINDOW_DAYS)
    days[:5] = np.nan
    frame = _frame(
        {"route": None, "team_size": math.nan},
        {"route": math.nan, "temperature_2m_mean": days},
        {"temperature_2m_mean": None},
    )

    assert malformed_rows(frame) == {}


def test_a_refusal_is_one_line_naming_the_first_rows_and_stays_so_when_rewritten() -> None:
    refused = RefusedRequest({row: f"reason {row}" for row in (1, 4, 5, 8, 9)})
    line = "row 1: reason 1; row 4: reason 4; row 5: reason 5; and 2 more rows"

    assert refused.message == line
    # What MLflow 3.17's scoring server does to an exception raised by predict.
    refused.message = f"Failed to predict data '   peak\n0  EVER'. \nError: {refused.message}"
    assert refused.message == line
    assert refused.get_http_status_code() == 400
    assert '"message": "row 1: reason 1;' in refused.serialize_as_json()
