"""BatchEnsemble (Wen et al. 2020), as TabM uses it (Gorishniy et al. 2025): k members of one
linear map in a single network.

Member m's map is W_m = W ⊙ (s_m r_mᵀ): the weight W is shared, each member adds two rank-1
adapters r_m (on the inputs) and s_m (on the outputs) and its own bias, so

    y_m = ((x ⊙ r_m) · Wᵀ) ⊙ s_m + b_m.

The members travel in the batch axis: B rows become B·k rows, row i belonging to member i mod
k, so every other block (norms, attention, dropout) runs on them unchanged. The maps where the
members' path starts (`first`) read the B shared rows and give the B·k: their k members'
weights W ⊙ r_mᵀ are stacked into one matrix, one product for all of them. As in TabM, those
first maps start their r_m as random signs (±1), so the members differ from the first step;
every other adapter starts at ones, so the shared W learns one function rather than k
sign-scrambled ones.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def tile_members(x: torch.Tensor, members: int) -> torch.Tensor:
    """(B, …) → (B·k, …): each row repeated k times in turn, row i for member i mod k."""
    return x.repeat_interleave(members, dim=0)


def split_members(x: torch.Tensor, members: int) -> torch.Tensor:
    """(B·k, …) → (B, k, …): the inverse view of `tile_members`."""
    return x.view(x.shape[0] // members, members, *x.shape[1:])


class EnsembleLinear(nn.Module):
    def __init__(
        self,
        in_features: int,
        out_features: int,
        members: int,
        bias: bool = True,
        first: bool = False,
    ) -> None:
        super().__init__()
        self.members = members  # k
        self.first = first  # reads the B shared rows, gives B·k
        self.weight = nn.Parameter(torch.empty(out_features, in_features))  # W, shared
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))  # nn.Linear's initialisation
        r = torch.ones(members, in_features)
        if first:
            r = torch.randint(0, 2, (members, in_features)).float() * 2 - 1
        self.input_scale = nn.Parameter(r)  # r: (k, in)
        self.output_scale = nn.Parameter(torch.ones(members, out_features))  # s: (k, out)
        bound = 1 / math.sqrt(in_features)
        self.bias = (
            nn.Parameter(torch.empty(members, out_features).uniform_(-bound, bound))
            if bias
            else None
        )  # b: (k, out)

    def _per_row(self, adapter: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """(k, d) → (B·k, 1, …, 1, d): each row's member's adapter, broadcast over x's middle."""
        rows = adapter.repeat(x.shape[0] // self.members, 1)  # (B·k, d)
        return rows.view(x.shape[0], *([1] * (x.ndim - 2)), adapter.shape[-1])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (B, …, in) for a first map, else (B·k, …, in) → (B·k, …, out)
        if self.first:
            out_features = self.weight.shape[0]
            # The k members' weights W ⊙ r_mᵀ stacked: (k · out, in), one product for all.
            stacked = (self.weight[None] * self.input_scale[:, None, :]).flatten(0, 1)
            y = F.linear(x, stacked).unflatten(-1, (self.members, out_features))  # (B, …, k, out)
            y = y.movedim(-2, 1).flatten(0, 1)  # (B·k, …, out)
        else:
            y = F.linear(x * self._per_row(self.input_scale, x), self.weight)
        y = y * self._per_row(self.output_scale, y)
        return y if self.bias is None else y + self._per_row(self.bias, y)

    def extra_repr(self) -> str:
        out_features, in_features = self.weight.shape
        return (
            f"in_features={in_features}, out_features={out_features}, members={self.members}, "
            f"first={self.first}"
        )


def row_adapters(layer: nn.Module, rows: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(r, s) of each of `rows` output rows of `layer`, (rows, in) and (rows, out): its
    member's adapters; (None, None) for a shared nn.Linear (no adapter)."""
    if not isinstance(layer, EnsembleLinear):
        return None, None
    times = rows // layer.members
    return layer.input_scale.repeat(times, 1), layer.output_scale.repeat(times, 1)


def linear(
    in_features: int, out_features: int, members: int, bias: bool = True, first: bool = False
) -> nn.Module:
    """A block's linear map: nn.Linear where the members share it (members = 1), else an
    EnsembleLinear with each member's adapters (`first`: where their path starts)."""
    if members == 1:
        return nn.Linear(in_features, out_features, bias=bias)
    return EnsembleLinear(in_features, out_features, members, bias, first)
