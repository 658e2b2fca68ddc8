import torch

from deepsummit.model.normalization import RMSNorm


def test_rmsnorm_matches_formula_by_hand():
    norm = RMSNorm(4, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.tensor([1.0, 2.0, 0.5, -1.0]))
    x = torch.tensor([[[1.0, 2.0, 3.0, 4.0], [-2.0, 0.0, 0.0, 2.0]]])  # (1, 2, 4)

    # Row 1: mean(x²) = (1 + 4 + 9 + 16) / 4 = 7.5; row 2: (4 + 0 + 0 + 4) / 4 = 2.
    rms = torch.tensor([[[(7.5 + 1e-6) ** 0.5], [(2.0 + 1e-6) ** 0.5]]])
    expected = x / rms * torch.tensor([1.0, 2.0, 0.5, -1.0])

    torch.testing.assert_close(norm(x), expected)
    assert norm(x).shape == (1, 2, 4)


def test_rmsnorm_does_not_center_and_keeps_shape():
    norm = RMSNorm(8)
    x = torch.full((2, 3, 8), 5.0)  # a constant row: LayerNorm would give 0, RMSNorm gives γ
    torch.testing.assert_close(norm(x), torch.ones(2, 3, 8), atol=1e-5, rtol=0)


def test_rmsnorm_in_bf16_keeps_dtype_and_matches_float32():
    norm = RMSNorm(8)
    x = torch.randn(2, 3, 8) * 100  # large values: squares would lose precision in bf16
    half = RMSNorm(8).bfloat16()(x.bfloat16())
    assert half.dtype == torch.bfloat16
    torch.testing.assert_close(half.float(), norm(x.bfloat16().float()), atol=2e-2, rtol=1e-2)
