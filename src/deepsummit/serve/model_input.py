"""What the registered pyfunc does with a request it cannot answer whole: it refuses it, in one
line naming the rows (counted from 0, as the request lists them) and why, and answers none of
its rows. `mlflow models serve` turns the refusal (an MlflowException of INVALID_PARAMETER_VALUE)
into HTTP 400, so a client never takes a 200 for an answer to every row it sent.

Two kinds of rows are refused: values that MLflow's schema check lets through but that are no
input of the model (a number where the signature says text, an infinite number), checked here
before any scoring; then the rows scoring itself cannot score (an unknown peak, a bad date,
weather that is not 90 days long), with the reason scoring gives (deepsummit/serve/scoring.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE

from deepsummit.core.planned import PLANNED_COLUMNS, WEATHER_COLUMNS
from deepsummit.serve.scoring import answers

if TYPE_CHECKING:
    import pandas as pd

    from deepsummit.contracts.artifact import ModelArtifact

# A refusal names this many rows at the most: one line, however large the batch.
ROWS_NAMED = 3
TEXT_COLUMNS = tuple(name for name, (kind, _) in PLANNED_COLUMNS.items() if kind == "string")
NUMBER_COLUMNS = tuple(name for name, (kind, _) in PLANNED_COLUMNS.items() if kind == "double")


class RefusedRequest(MlflowException):
    """A request the model does not answer: `reasons` by request row, and one line that names
    the first rows and why."""

    def __init__(self, reasons: Mapping[int, str]) -> None:
        self.reasons = dict(reasons)
        named = [f"row {row}: {reason}" for row, reason in list(self.reasons.items())[:ROWS_NAMED]]
        more = len(self.reasons) - len(named)
        self._line = "; ".join(named) + (f"; and {more} more rows" if more else "")
        super().__init__(self._line, error_code=INVALID_PARAMETER_VALUE)

    # MLflow's scoring server (3.17) rewrites the message of an exception raised by predict as
    # "Failed to predict data '<the request's repr>'. \nError: <message>": several lines that
    # echo the request back to the client. The refusal keeps its one line.
    @property
    def message(self) -> str:
        return self._line

    @message.setter
    def message(self, _rewritten: str) -> None:
        pass


def answer_whole(
    artifact: ModelArtifact, request: pd.DataFrame, top_tokens: int = 0
) -> pd.DataFrame:
    """The model's answer to every row of `request` (scoring.answers), or RefusedRequest when
    any row cannot be answered."""
    reasons = malformed_rows(request)
    if reasons:
        raise RefusedRequest(reasons)
    answer = answers(artifact, request, top_tokens)
    reasons = {row: error for row, error in enumerate(answer["error"]) if error}
    if reasons:
        raise RefusedRequest(reasons)
    return answer


def malformed_rows(request: pd.DataFrame) -> dict[int, str]:
    """The first malformed value of each row whose values MLflow's schema check let through
    but the model cannot read: text columns holding something else (scoring would read the
    route 7 as the route "7"), and infinite numbers, in a number column or a weather day
    (missing is null, or NaN: a number that is no number)."""
    reasons: dict[int, str] = {}
    for row, record in enumerate(request.to_dict(orient="records")):
        reason = next(filter(None, (_malformed(name, record.get(name)) for name in record)), None)
        if reason:
            reasons[row] = reason
    return reasons


def _malformed(name: str, value: Any) -> str | None:
    if name in TEXT_COLUMNS and not (_missing(value) or isinstance(value, str)):
        return f"{name} {value!r}: not text"
    if name in NUMBER_COLUMNS and not (_missing(value) or math.isfinite(value)):
        return f"{name} {float(value)}: not a finite number"
    if name in WEATHER_COLUMNS and not _missing(value):
        for day, number in enumerate(value):
            if not (_missing(number) or math.isfinite(number)):
                before = len(value) - 1 - day
                return f"{name} {float(number)} on D-{before}: not a finite number"
    return None


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
