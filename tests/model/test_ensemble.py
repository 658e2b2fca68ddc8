import torch

from deepsummit.model.ensemble import EnsembleLinear, linear, split_members, tile_members


def test_tiling_puts_member_m_of_row_b_at_row_b_k_plus_m():
    x = torch.arange(6.0).view(2, 3)  # (B, …)
    tiled = tile_members(x, 4)  # (B·k, …)
    assert tiled.shape == (8, 3)
    assert torch.equal(tiled[1], x[0]) and torch.equal(tiled[4], x[1])
    assert torch.equal(split_members(tiled, 4)[:, 2], x)  # (B, k, …)


def test_each_member_is_its_own_rank_one_rescaling_of_the_shared_weight():
    torch.manual_seed(0)
    layer = EnsembleLinear(5, 3, members=2)
    with torch.no_grad():
        layer.input_scale.uniform_(0.5, 1.5)
        layer.output_scale.uniform_(0.5, 1.5)
    x = torch.randn(4 * 2, 7, 5)  # (B·k, S, in)
    y = layer(x)
    assert y.shape == (8, 7, 3)
    for member in range(2):
        # W_m = W ⊙ (s_m r_mᵀ): the member's own weight, applied the ordinary way.
        weight = layer.weight * torch.outer(layer.output_scale[member], layer.input_scale[member])
        expected = x[member::2] @ weight.T + layer.bias[member]
        torch.testing.assert_close(y[member::2], expected)


def test_a_first_map_gives_each_member_its_row_from_the_shared_ones():
    """Where the members' path starts the map reads B shared rows and gives B·k: member m's
    row is what the member's own map gives the shared row, all in one product."""
    torch.manual_seed(0)
    first = EnsembleLinear(5, 3, members=2, first=True)
    tiled = EnsembleLinear(5, 3, members=2)
    tiled.load_state_dict(first.state_dict())
    x = torch.randn(4, 7, 5)  # (B, S, in), shared by the members
    y = first(x)
    assert y.shape == (8, 7, 3)  # (B·k, S, out)
    torch.testing.assert_close(y, tiled(tile_members(x, 2)))


def test_members_start_apart_only_where_their_path_starts():
    torch.manual_seed(0)
    first = EnsembleLinear(16, 8, members=4, first=True)
    later = EnsembleLinear(16, 8, members=4)
    assert set(first.input_scale.unique().tolist()) == {-1.0, 1.0}
    assert torch.equal(later.input_scale, torch.ones(4, 16))
    assert torch.equal(later.output_scale, torch.ones(4, 8))
    assert isinstance(linear(16, 8, members=1), torch.nn.Linear)  # shared: the spec's map
