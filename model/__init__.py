"""The DeepSummit transformer (PyTorch only), one small file per block of the model spec."""

from model.config import ModelConfig
from model.summary import parameter_breakdown
from model.transformer import DeepSummitTransformer

__all__ = ["DeepSummitTransformer", "ModelConfig", "parameter_breakdown"]
