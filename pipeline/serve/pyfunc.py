"""The registered model as an MLflow pyfunc: P(summit) for rows in the artifact's input layout
(`pipeline.train.artifact`), and which tokens weighed most (attention rollout)."""

from __future__ import annotations

import mlflow
import numpy as np
import pandas as pd
import torch

from model import DeepSummitTransformer
from pipeline.features.dataset import FeatureArrays, to_tensors
from pipeline.features.spec import WINDOW_SCALES
from pipeline.train.artifact import TABULAR_COLUMNS, ModelFiles, split_model_input
from pipeline.train.trainer import predict_proba


def weather_token_names() -> tuple[str, ...]:
    """Readable names of the 26 weather tokens: "weather 1d D-3", "weather 3d D-29…D-27"."""
    names = []
    for scale in WINDOW_SCALES:
        width = scale.days_per_token
        for bucket in range(scale.tokens):
            newest = (scale.tokens - 1 - bucket) * width
            oldest = newest + width - 1
            day = "D" if newest == 0 else f"D-{newest}"
            span = day if width == 1 else f"D-{oldest}…{day}"
            names.append(f"weather {width}d {span}")
    return tuple(names)


TOKEN_NAMES: tuple[str, ...] = ("CLS", *TABULAR_COLUMNS, *weather_token_names())


def token_importance(model: DeepSummitTransformer, arrays: FeatureArrays) -> np.ndarray:
    """Attention rollout from CLS (Abnar & Zuidema 2020), averaged over heads: (N, 46), one
    share per non-CLS token, each row summing to 1. The residual path counts as half of each
    layer's mixing, as in the paper."""
    model.eval()
    with torch.inference_mode():
        _, attention = model(**to_tensors(arrays.model_inputs()), return_attention=True)
    size = attention[0].shape[-1]
    rollout = torch.eye(size).expand(len(arrays), size, size)
    for layer in attention:
        mixing = 0.5 * layer.mean(dim=1) + 0.5 * torch.eye(size)
        rollout = (mixing / mixing.sum(dim=-1, keepdim=True)) @ rollout
    from_cls = rollout[:, 0, 1:]
    return (from_cls / from_cls.sum(dim=-1, keepdim=True)).numpy()


class DeepSummitModel(mlflow.pyfunc.PythonModel):
    """P(summit) for raw feature rows (see `pipeline.train.artifact` for the input layout)."""

    def load_context(self, context: mlflow.pyfunc.PythonModelContext) -> None:
        self.model, self.preprocessor = ModelFiles.from_artifacts(context.artifacts).load()

    def arrays(self, model_input: pd.DataFrame) -> FeatureArrays:
        return self.preprocessor.transform(*split_model_input(model_input))

    def predict(self, context, model_input: pd.DataFrame, params=None) -> np.ndarray:
        return predict_proba(self.model, self.arrays(model_input))
