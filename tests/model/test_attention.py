import math

import torch

from deepsummit.model.attention import MultiHeadAttention


def make_attention(seed: int = 0) -> MultiHeadAttention:
    torch.manual_seed(seed)
    return MultiHeadAttention(hidden_size=16, num_heads=4, dropout=0.1).eval()


def test_shapes_as_in_spec_table():
    attention = make_attention()
    x = torch.randn(3, 47, 16)
    q = attention._split_heads(attention.q_proj(x), batch=3)
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


def test_cls_only_gives_cls_exactly_what_the_full_layer_gives_it():
    """The last block's attention: only CLS queries, every token is a key."""
    full = make_attention()
    cls_only = MultiHeadAttention(hidden_size=16, num_heads=4, dropout=0.1, cls_only=True).eval()
    cls_only.load_state_dict(full.state_dict())
    x = torch.randn(2, 47, 16)
    present = torch.rand(2, 47) > 0.3
    present[:, 0] = True

    expected, weights = full(x, present, return_attention=True)
    output, cls_weights = cls_only(x, present, return_attention=True)
    assert output.shape == (2, 1, 16)  # (B, 1, H)
    assert cls_weights.shape == (2, 4, 1, 47)  # (B, n_h, 1, S)
    torch.testing.assert_close(output, expected[:, :1])
    torch.testing.assert_close(cls_weights, weights[:, :, :1])
    torch.testing.assert_close(cls_only(x, present)[0], output, atol=1e-6, rtol=1e-5)


def test_members_query_from_cls_through_their_own_adapters():
    """With the members' path starting at CLS, each member asks its own query of the shared
    keys and values: B·k rows out, member m's row computed with its adapters only."""
    torch.manual_seed(0)
    members = 3
    attention = MultiHeadAttention(
        hidden_size=16, num_heads=4, dropout=0.0, cls_only=True, members=members,
        tile_queries=True,
    ).eval()  # fmt: skip
    x = torch.randn(2, 47, 16)
    output, _ = attention(x)
    assert output.shape == (2 * members, 1, 16)  # (B·k, 1, H)

    q_proj, out_proj = attention.q_proj, attention.out_proj
    for member in range(members):
        query = (x[:, :1] * q_proj.input_scale[member]) @ q_proj.weight.T
        query = query * q_proj.output_scale[member]  # (B, 1, H), member m's W^Q
        keys, values = attention.k_proj(x), attention.v_proj(x)  # shared
        heads = []
        for head in range(4):
            cols = slice(4 * head, 4 * head + 4)
            scores = query[..., cols] @ keys[..., cols].transpose(1, 2) / math.sqrt(4)
            heads.append(scores.softmax(-1) @ values[..., cols])
        context = torch.cat(heads, dim=-1)
        expected = (context * out_proj.input_scale[member]) @ out_proj.weight.T
        expected = expected * out_proj.output_scale[member]
        torch.testing.assert_close(output[member::members], expected, atol=1e-5, rtol=1e-5)
