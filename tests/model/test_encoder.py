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
        assert hidden.shape == (2, 47, 16)  # per_block (B, S, H)
    encoded, attention = encoder(x)
    assert attention == []
    torch.testing.assert_close(encoded, encoder.norm(hidden))  # final RMSNorm


def test_encoder_returns_attention_per_layer(small_config):
    encoder = TransformerEncoder(small_config).eval()
    encoded, attention = encoder(torch.randn(2, 47, 16), return_attention=True)
    assert encoded.shape == (2, 47, 16)
    assert [weights.shape for weights in attention] == [(2, 2, 47, 47)] * 3
