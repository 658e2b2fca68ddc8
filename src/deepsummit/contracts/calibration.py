"""Post-hoc calibration: a map from the model's logit to a probability, fitted on held-out member
records (the member check, deepsummit/train/recipe.py) and applied to everything the model says
afterwards.

- temperature: p = σ(z / T), one parameter; keeps the ranking, fixes over- or under-confidence.
- platt: p = σ(a·z + b), two parameters; also moves the base rate.
- isotonic: a monotone step function of z fitted by pool-adjacent-violators; the most flexible.

Which one the models use is `train.calibration` (deepsummit/core/sections.py says why the default
is the one it is). Temperature and Platt are strictly monotone in z, so they leave the AUC as it
was; isotonic's steps tie rows and can change it.

Temperature and Platt may also shift the logit of each member group of some families
(`train.calibration_shifts_by`, deepsummit/contracts/member_groups.py), fitted with them:

    p = σ(a·z + b + Σ_f s_f[group of the row]),    Σ_g share_g · s_f[g] = 0

by log loss plus `penalty` · Σ s², the shares those of the fitting rows whose group is known:
the shifts average to nothing there, so the answers' level stays the map's, and a row whose
group is unknown (an expedition record has no member's age) gets no shift. Within one group the
map is still monotone in z; across groups it moves one group's answers against another's,
which is what it is for: the network's answer for the oldest climbers stays near the others'
while their summit rate does not (docs/evaluation.md).

Age is a number, so its shift is a curve rather than a step per band: s(age) is linear between
knots every ten years (`CURVE_KNOTS`, flat outside them), fitted as one shift per knot with
each row weighted by its two neighbouring knots (hat functions). Those weights sum to one, so
the centring above holds for the curve as for the groups, and nobody's answer jumps on a
birthday.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Literal

import numpy as np
import polars as pl

from deepsummit.contracts.member_groups import AGE_BAND_STARTS, GROUP_FAMILIES

Method = Literal["none", "temperature", "platt", "isotonic"]
# The families whose shift is a curve of a member column, and its knots (see the docstring).
CURVE_KNOTS: dict[str, tuple[int, ...]] = {"age": AGE_BAND_STARTS}


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def _hats(values: np.ndarray, knots: tuple[int, ...]) -> np.ndarray:
    """(rows, knots): each value's weight on each knot, linear between its two neighbours and
    all on the nearest knot outside them; rows of a missing value weigh nothing."""
    points = np.asarray(knots, np.float64)
    clipped = np.clip(values, points[0], points[-1])
    weights = np.stack(
        [np.interp(clipped, points, np.eye(len(points))[k]) for k in range(len(points))], axis=1
    )
    return np.nan_to_num(weights * np.isfinite(values)[:, None])


def _curve_values(rows: pl.DataFrame, family: str) -> np.ndarray:
    """The member column a curve's family reads, NaN where it is unknown."""
    return rows[family].cast(pl.Float64).fill_null(np.nan).to_numpy()


def _memberships(rows: pl.DataFrame, family: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The family's levels (its groups, or a curve's knots), each row's weight on each level
    (rows, levels), and whether the row's family is known."""
    if family in CURVE_KNOTS:
        values = _curve_values(rows, family)
        return (
            [str(k) for k in CURVE_KNOTS[family]],
            _hats(values, CURVE_KNOTS[family]),
            np.isfinite(values),
        )
    groups = rows.select(GROUP_FAMILIES[family].alias(family))[family]
    levels = sorted(groups.drop_nulls().unique())
    weights = np.stack([(groups == g).fill_null(False).to_numpy() for g in levels], axis=1)
    return levels, weights.astype(np.float64), groups.is_not_null().to_numpy()


def _centred_indicators(
    rows: pl.DataFrame, families: tuple[str, ...]
) -> tuple[list[tuple[str, str]], np.ndarray, np.ndarray]:
    """The levels `(family, group or knot)` of `families` that `rows` hold; each row's weight on
    each, less the level's share of the rows where its family is known (zero where it is
    unknown): (rows, levels); and the shares."""
    levels: list[tuple[str, str]] = []
    columns, all_shares = [], []
    for family in families:
        names, weights, known = _memberships(rows, family)
        shares = weights[known].sum(axis=0) / known.sum()
        levels += [(family, name) for name in names]
        columns.append((weights - shares) * known[:, None])
        all_shares.append(shares)
    return levels, np.hstack(columns), np.concatenate(all_shares)


def _centred_shifts(
    raw: np.ndarray, levels: list[tuple[str, str]], shares: np.ndarray, families: tuple[str, ...]
) -> dict[str, dict[str, float]]:
    """The fitted shifts `raw` of the groups `levels`, centred within each family by the groups'
    `shares`, as family → group → s_f[g]."""
    family_of = np.array([family for family, _ in levels])
    # s_f[g] = raw_g − Σ_g' share_g' · raw_g' over the family's groups
    shifts = raw - np.array([np.sum((shares * raw)[family_of == f]) for f in family_of])
    return {
        family: {g: float(v) for (f, g), v in zip(levels, shifts, strict=True) if f == family}
        for family in families
    }


@dataclass(frozen=True)
class Calibrator:
    method: Method
    scale: float = 1.0  # temperature: 1 / T; platt: a
    shift: float = 0.0  # platt: b
    # isotonic: the fitted step function, logit thresholds and their probabilities
    thresholds: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    # temperature, platt: family → group → its shift s_f[g] (centred: see the module docstring);
    # a curve's family (`CURVE_KNOTS`): knot → its shift, linear between knots
    group_shifts: dict[str, dict[str, float]] = field(default_factory=dict)

    @classmethod
    def fit(
        cls,
        method: Method,
        logits: np.ndarray,
        labels: np.ndarray,
        rows: pl.DataFrame | None = None,
        shifts_by: tuple[str, ...] = (),
        penalty: float = 0.01,
    ) -> Calibrator:
        """The map of `method` fitted on `logits` and their `labels`; with `shifts_by`, a shift
        per group of those families of `rows` (the member columns of the same rows) too."""
        # Imported here: fitting is training's; a model that only applies its map (every
        # `deepsummit predict`) is spared their second of imports.
        from scipy.optimize import minimize
        from sklearn.isotonic import IsotonicRegression

        logits, labels = np.asarray(logits, np.float64), np.asarray(labels, np.float64)
        if shifts_by and method not in ("temperature", "platt"):
            raise ValueError(f"a {method!r} map cannot shift member groups: temperature or platt")
        if method == "none":
            return cls("none")
        if method == "isotonic":
            iso = IsotonicRegression(out_of_bounds="clip", y_min=0.0, y_max=1.0)
            iso.fit(logits, labels)
            return cls(
                "isotonic",
                thresholds=[float(x) for x in iso.X_thresholds_],
                values=[float(y) for y in iso.y_thresholds_],
            )
        levels: list[tuple[str, str]] = []
        centred, shares = np.zeros((len(logits), 0)), np.zeros(0)
        if shifts_by:
            if rows is None:
                raise ValueError(f"shifts by {', '.join(shifts_by)} need the rows' member columns")
            levels, centred, shares = _centred_indicators(rows, shifts_by)
        platt = method == "platt"
        own = [1.0, 0.0] if platt else [1.0]  # the map's own parameters, a (and b), at rest
        count = len(own)

        def loss(params: np.ndarray) -> float:
            a, b = (params[0], params[1]) if platt else (params[0], 0.0)
            p = np.clip(_sigmoid(a * logits + b + centred @ params[count:]), 1e-12, 1 - 1e-12)
            log_loss = -np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p))
            return float(log_loss + penalty * np.sum(params[count:] ** 2))

        bounds = [(-10.0, 10.0)] * 2 if platt else [(0.05, 20.0)]
        result = minimize(
            loss, np.r_[own, np.zeros(len(levels))], bounds=bounds + [(-5.0, 5.0)] * len(levels)
        )
        return cls(
            method,
            scale=float(result.x[0]),
            shift=float(result.x[1]) if platt else 0.0,
            group_shifts=_centred_shifts(result.x[count:], levels, shares, shifts_by),
        )

    def group_offsets(self, rows: pl.DataFrame | None, count: int) -> np.ndarray:
        """(count,): each row's logit shift, Σ_f s_f[group] (none where the group is unknown);
        zeros for a map without shifts."""
        if not self.group_shifts:
            return np.zeros(count)
        if rows is None or rows.height != count:
            raise ValueError(
                f"this map shifts by {', '.join(self.group_shifts)}: it needs the member columns "
                "of every row it answers"
            )
        offset = np.zeros(count)
        for family, shifts in self.group_shifts.items():
            if family in CURVE_KNOTS and set(shifts) == {str(k) for k in CURVE_KNOTS[family]}:
                knots = CURVE_KNOTS[family]
                at_knots = np.array([shifts[str(k)] for k in knots])
                offset += _hats(_curve_values(rows, family), knots) @ at_knots
                continue
            # A family of groups (a map fitted before age became a curve kept its age bands).
            groups = rows.select(GROUP_FAMILIES[family].alias(family))[family]
            mapped = groups.replace_strict(shifts, default=0.0, return_dtype=pl.Float64)
            offset += mapped.fill_null(0.0).to_numpy()
        return offset

    def probabilities(self, logits: np.ndarray, rows: pl.DataFrame | None = None) -> np.ndarray:
        """Element by element, for logits of any shape (one seed's (N,), the seeds' (S, N));
        `rows`: the N rows' member columns, for a map with group shifts."""
        z = np.asarray(logits, np.float64)
        if self.method == "isotonic":
            return np.interp(z, self.thresholds, self.values)
        return _sigmoid(self.scale * z + self.shift + self.group_offsets(rows, z.shape[-1]))

    @property
    def name(self) -> str:
        """The method and the families it shifts: "temperature + age shifts"."""
        return " + ".join([self.method, *(f"{family} shifts" for family in self.group_shifts)])

    def describe(self) -> str:
        """The map in a few words: "temperature, logits × 1.234, age shifts: under 30 +0.12, …"."""
        words = (
            f"{self.method}, logits × {self.scale:.3f}"
            if self.method == "temperature"
            else self.method
        )
        for family, shifts in self.group_shifts.items():
            listed = ", ".join(f"{g} {v:+.2f}" for g, v in shifts.items())
            words += f"; {family} shifts: {listed}"
        return words

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> Calibrator:
        return cls(**json.loads(text))
