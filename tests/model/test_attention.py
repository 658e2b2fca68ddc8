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


def test_where_the_members_path_starts_each_member_attends_through_its_own_adapters():
    """The first block of the members' path reads the B shared rows and gives B·k: member m's
    row is the attention computed with W ⊙ (s_m r_mᵀ) for W^Q, W^K, W^V and W^O."""
    torch.manual_seed(0)
    members = 3
    attention = MultiHeadAttention(
        hidden_size=16, num_heads=4, dropout=0.0, cls_only=True, members=members,
        first_of_members=True,
    ).eval()  # fmt: skip
    x = torch.randn(2, 47, 16)
    present = torch.ones(2, 47, dtype=torch.bool)
    present[1, 40:] = False
    output, _ = attention(x, present)
    assert output.shape == (2 * members, 1, 16)  # (B·k, 1, H)

    def member_map(layer, m, inputs):
        return (inputs * layer.input_scale[m]) @ layer.weight.T * layer.output_scale[m]

    for m in range(members):
        query = member_map(attention.q_proj, m, x[:, :1])  # (B, 1, H)
        keys, values = member_map(attention.k_proj, m, x), member_map(attention.v_proj, m, x)
        heads = []
        for head in range(4):
            cols = slice(4 * head, 4 * head + 4)
            scores = query[..., cols] @ keys[..., cols].transpose(1, 2) / math.sqrt(4)
            scores = scores.masked_fill(~present[:, None, :], float("-inf"))
            heads.append(scores.softmax(-1) @ values[..., cols])
        expected = member_map(attention.out_proj, m, torch.cat(heads, dim=-1))
        torch.testing.assert_close(output[m::members], expected, atol=1e-5, rtol=1e-5)
