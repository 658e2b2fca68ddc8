import torch

from deepsummit.model.config import ModelConfig
from deepsummit.model.ffn import SwiGLU


def test_swiglu_matches_formula_by_hand():
    torch.manual_seed(0)
    ffn = SwiGLU(hidden_size=4, ffn_hidden_size=6)
    x = torch.randn(2, 3, 4)
    w1, w2, w3 = ffn.gate_proj.weight, ffn.value_proj.weight, ffn.output_proj.weight

    gate = x @ w1.T
    swish = gate / (1 + torch.exp(-gate))  # Swish(z) = z · σ(z)
    expected = (swish * (x @ w2.T)) @ w3.T

    torch.testing.assert_close(ffn(x), expected)


def test_swiglu_shapes_and_hidden_width():
    config = ModelConfig()
    assert config.ffn_hidden_size == 683  # 8 × 256 / 3 = 682.67, as in the parameter estimate
    ffn = SwiGLU(32, ModelConfig(hidden_size=32, num_heads=4).ffn_hidden_size)
    assert ffn.gate_proj.out_features == 85  # round(8 × 32 / 3)
    assert ffn.gate_proj(torch.randn(2, 47, 32)).shape == (2, 47, 85)  # (B, S, ffn_hidden)
    assert ffn(torch.randn(2, 47, 32)).shape == (2, 47, 32)
    assert all(linear.bias is None for linear in (ffn.gate_proj, ffn.value_proj, ffn.output_proj))
