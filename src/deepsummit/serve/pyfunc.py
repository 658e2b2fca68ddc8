"""The registered model as an MLflow pyfunc: planned attempts in (deepsummit/serve/planned.py),
calibrated P(summit) out, with its band (the ensemble members' lowest and highest P), whether
the weather took part, notes, which models answered (the transformer, or its blend with the best
tree), and on request (`params={"top_tokens": 5}`) the tokens that weighed most. A request with
a row it cannot score is refused whole (deepsummit/serve/model_input.py), so `error` is null in
every answer. Served as is by
`mlflow models serve -m models:/deepsummit@champion --env-manager local`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlflow
import pandas as pd
from mlflow.models import ModelSignature
from mlflow.types.schema import Array, ColSpec, ParamSchema, ParamSpec, Schema

from deepsummit.contracts.artifact import ARTIFACT_NAME, ModelArtifact
from deepsummit.core.planned import PLANNED_COLUMNS, WEATHER_COLUMNS
from deepsummit.serve.model_input import answer_whole

# The file MLflow imports to build the pyfunc of a registered version ("models from code").
MODEL_CODE_FILE = Path(__file__).with_name("model_code.py")


def signature() -> ModelSignature:
    """What `mlflow models serve` checks a request against (optional columns may be left out)."""
    inputs = [
        ColSpec(kind, name, required=required) for name, (kind, required) in PLANNED_COLUMNS.items()
    ]
    inputs += [ColSpec(Array("double"), name, required=False) for name in WEATHER_COLUMNS]
    outputs = [
        ColSpec("double", "probability"),
        ColSpec("double", "probability_low"),
        ColSpec("double", "probability_high"),
        ColSpec("boolean", "weather_used", required=False),
        ColSpec("string", "error", required=False),
        ColSpec("string", "notes", required=False),
        ColSpec("string", "answered_by", required=False),
        ColSpec("string", "top_tokens", required=False),
    ]
    params = ParamSchema([ParamSpec("top_tokens", "long", 0)])
    return ModelSignature(inputs=Schema(inputs), outputs=Schema(outputs), params=params)


class DeepSummitModel(mlflow.pyfunc.PythonModel):
    def load_context(self, context: mlflow.pyfunc.PythonModelContext) -> None:
        self.artifact = ModelArtifact.load(Path(context.artifacts[ARTIFACT_NAME]))

    def predict(
        self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None
    ) -> pd.DataFrame:
        return answer_whole(self.artifact, model_input, int((params or {}).get("top_tokens", 0)))
