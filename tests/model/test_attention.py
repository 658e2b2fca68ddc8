import math

import torch

from deepsummit.model.attention import MultiHeadAttention


def make_attention(seed: int = 0) -> MultiHeadAttention:
    torch.manual_seed(seed)
    return MultiHeadAttention(hidden_size=16, num_heads=4, dropout=0.1).eval()


def test_shapes_as_in_spec_table():
    attention = make_attention()
    x = torch.randn(3, 47, 16)
    q = attention._split_heads(attention.q_proj(x))
    assert q.shape == (3, 4, 47, 4)  # (B, n_h, S, d_k)
    output, weights = attention(x, return_attention=True)
    assert output.shape == (3, 47, 16)  # (B, S, H)
    assert weights.shape == (3, 4, 47, 47)  # (B, n_h, S, S)


def test_weights_are_row_stochastic_and_match_the_formula():
    attention = make_attention()
    x = torch.randn(2, 5, 16)
    _, weights = attention(x, return_attention=True)
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(2, 4, 5))

    # softmax(Q·Kᵀ / √d_k) for head 1, by hand from the projection weights.
    head = slice(4, 8)
    q = x @ attention.q_proj.weight[head].T  # (B, S, d_k)
    k = x @ attention.k_proj.weight[head].T
    expected = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(4), dim=-1)
    torch.testing.assert_close(weights[:, 1], expected)


def test_sdpa_output_equals_explicit_weights_path():
    attention = make_attention()
    x = torch.randn(2, 47, 16)
    fused, no_weights = attention(x)
    explicit, _ = attention(x, return_attention=True)
    assert no_weights is None
    torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=1e-5)


def test_attention_dropout_only_in_training():
    attention = make_attention()
    x = torch.randn(2, 47, 16)
    torch.testing.assert_close(attention(x)[0], attention(x)[0])  # eval: deterministic
    attention.train()
    assert not torch.equal(attention(x)[0], attention(x)[0])
