import math

import pytest
import torch

from deepsummit.model.regularization import DropPath, drop_path_schedule


def test_linear_schedule_as_in_spec():
    assert drop_path_schedule(0.1, 6) == pytest.approx([0.0, 0.02, 0.04, 0.06, 0.08, 0.10])
    assert drop_path_schedule(0.2, 1) == [0.0]


def test_droppath_is_identity_in_eval():
    drop = DropPath(0.5).eval()
    x = torch.randn(64, 5, 4)
    assert torch.equal(drop(x), x)


def test_droppath_keeps_one_minus_p_of_samples_and_scales_them():
    torch.manual_seed(0)
    p, n = 0.3, 20_000
    drop = DropPath(p).train()
    out = drop(torch.ones(n, 3, 4))

    per_sample = out.flatten(1)
    kept = per_sample[:, 0] != 0
    # Whole paths are dropped or kept: every sample is all zeros or all 1 / (1 − p).
    assert torch.all(per_sample[~kept] == 0)
    torch.testing.assert_close(per_sample[kept], torch.full_like(per_sample[kept], 1 / (1 - p)))
    # Kept count ~ Binomial(n, 1 − p): within 4 standard deviations of its mean.
    std = math.sqrt(n * p * (1 - p))
    assert abs(kept.sum().item() - n * (1 - p)) < 4 * std
    # The expectation is preserved.
    assert abs(out.mean().item() - 1.0) < 4 * std / (n * (1 - p))


def test_droppath_with_zero_probability_is_identity_in_train():
    x = torch.randn(8, 2, 3)
    assert torch.equal(DropPath(0.0).train()(x), x)
