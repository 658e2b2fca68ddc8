import pytest
import torch

from deepsummit.model.encoder import TransformerBlock, TransformerEncoder


def test_block_is_pre_norm_residual(small_config):
    torch.manual_seed(0)
    block = TransformerBlock(small_config, drop_path_prob=0.0).eval()
    x = torch.randn(2, 47, 16)

    attended, _ = block.attention(block.norm1(x))
    x_prime = x + attended  # x' = x + MHA(RMSNorm(x))
    expected = x_prime + block.ffn(block.norm2(x_prime))  # x'' = x' + SwiGLU(RMSNorm(x'))

    output, weights = block(x)
    assert output.shape == (2, 47, 16)
    assert weights is None
    torch.testing.assert_close(output, expected)


def test_the_last_block_gives_cls_what_a_full_block_gives_it(small_config):
    torch.manual_seed(0)
    full = TransformerBlock(small_config, drop_path_prob=0.0).eval()
    last = TransformerBlock(small_config, drop_path_prob=0.0, last=True).eval()
    last.load_state_dict(full.state_dict())
    x = torch.randn(2, 47, 16)
    present = torch.ones(2, 47, dtype=torch.bool)
    present[0, 30:] = False  # absent weather tokens

    expected, _ = full(x, present)
    output, _ = last(x, present)
    assert output.shape == (2, 1, 16)  # CLS only: (B, 1, H)
    torch.testing.assert_close(output, expected[:, :1], atol=1e-6, rtol=1e-5)


def test_encoder_schedule_shapes_and_final_norm(small_config):
    torch.manual_seed(0)
    encoder = TransformerEncoder(small_config).eval()
    probs = [block.drop_path1.drop_prob for block in encoder.blocks]
    assert probs == pytest.approx([0.0, 0.05, 0.1])  # rate 0.1 over 3 layers
    assert [block.drop_path2.drop_prob for block in encoder.blocks] == probs

    x = torch.randn(2, 47, 16)
    hidden = x
    for block in encoder.blocks:
        hidden, _ = block(hidden)
    assert hidden.shape == (2, 1, 16)  # the last block: CLS only (B, 1, H)
    encoded, attention = encoder(x)
    assert attention == []
    torch.testing.assert_close(encoded, encoder.norm(hidden))  # final RMSNorm


def test_encoder_returns_attention_per_layer(small_config):
    encoder = TransformerEncoder(small_config).eval()
    encoded, attention = encoder(torch.randn(2, 47, 16), return_attention=True)
    assert encoded.shape == (2, 1, 16)
    # Every token's row in the first layers, CLS's row in the last: what a rollout from CLS reads.
    assert [weights.shape for weights in attention] == [(2, 2, 47, 47)] * 2 + [(2, 2, 1, 47)]


@pytest.mark.parametrize("ensemble_layers", [1, 2, 3])
def test_ensemble_members_leave_the_encoder_one_cls_each(small_config, ensemble_layers):
    """k members: CLS once per member, B·k rows, however many blocks they run through; the
    shared blocks before see the B rows once."""
    from dataclasses import replace

    config = replace(small_config, ensemble_size=4, ensemble_layers=ensemble_layers)
    torch.manual_seed(0)
    encoder = TransformerEncoder(config).eval()
    encoded, attention = encoder(torch.randn(2, 47, 16), return_attention=True)
    assert encoded.shape == (8, 1, 16)  # (B·k, 1, H)
    assert [weights.shape for weights in attention] == [(2, 2, 47, 47)] * 2 + [(2, 2, 1, 47)]
    rows = encoded.view(2, 4, 16)
    assert not torch.allclose(rows[:, 0], rows[:, 1])  # the members differ from the start
