"""Profiling a frame: the bins of each column and the rows in them (deepsummit/contracts/
profile.py holds the result). Columns are numeric or categorical here: tabular features and
weather variables are treated alike, each frame at its own grain (one row per attempt, or per
attempt and weather token). Built in plain NumPy/Polars: docs/decisions/0001-drift-without-a-
library.md says why.

Bins, once for every column:
- numeric: cut at the interior quantiles of the reference's present values (probabilities
  1/bins … (bins−1)/bins, duplicates dropped), giving len(edges) + 1 value bins whose outer ones
  are open, (−∞, e₁) and [e_k, +∞), so values beyond the reference range still count; a value on
  an edge falls in the bin above it. Null, NaN and ±inf make one more bin, "missing".
- categorical: one bin per value holding at least `min_category_share` of the reference rows,
  then OTHER (rarer values, and values the reference never had), then MISSING (null).
Shares are fractions of all the column's rows, missing included, so each column's shares sum to 1.
With `strata=COLUMN`, the rows of each stratum are counted on the same bins.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from deepsummit.contracts.distribution import (
    MISSING,
    OTHER,
    CategoricalProfile,
    DistributionProfile,
    NumericProfile,
    Stratum,
    mean_and_sd,
)

DEFAULT_BINS = 10
DEFAULT_MIN_CATEGORY_SHARE = 0.01  # also bounds a categorical's profile to ≤ 100 values


def profile(
    frame: pl.DataFrame,
    numeric: Sequence[str],
    categorical: Sequence[str],
    bins: int = DEFAULT_BINS,
    *,
    min_category_share: float = DEFAULT_MIN_CATEGORY_SHARE,
    description: str = "",
    strata: str | None = None,
) -> DistributionProfile:
    """The reference distribution of each named column of `frame` (see the module docstring);
    with `strata`, a column of `frame` naming each row's stratum, also the rows of each stratum
    on the same bins."""
    if bins < 2:
        raise ValueError(f"bins must be at least 2, got {bins}")
    both = set(numeric) & set(categorical)
    if both:
        raise ValueError(f"{sorted(both)} named both numeric and categorical")
    require_columns(frame, [*numeric, *categorical, *([strata] if strata else [])])
    reference = DistributionProfile(
        numeric={name: _numeric_profile(frame[name], bins) for name in numeric},
        categorical={
            name: _categorical_profile(frame[name], min_category_share) for name in categorical
        },
        description=description,
    )
    if strata is None:
        return reference
    return DistributionProfile(
        reference.numeric, reference.categorical, description, _strata(reference, frame, strata)
    )


def _strata(reference: DistributionProfile, frame: pl.DataFrame, column: str) -> dict[str, Stratum]:
    """Each stratum's rows in the bins of `reference`, and its numeric moments."""
    names, index = np.unique(
        frame[column].cast(pl.String).to_numpy().astype(str), return_inverse=True
    )
    counts: dict[str, np.ndarray] = {}  # feature → (strata, bins)
    moments: dict[str, np.ndarray] = {}  # feature → (strata, 3)
    for name, numeric in reference.numeric.items():
        values = numeric_values(frame[name])
        bin_of = np.where(
            np.isnan(values),
            len(numeric.edges) + 1,
            np.searchsorted(np.asarray(numeric.edges), np.nan_to_num(values), side="right"),
        )
        counts[name] = _per_stratum(index, bin_of, len(names), len(numeric.shares))
        present = ~np.isnan(values)
        moments[name] = np.stack(
            [
                np.bincount(index[present], minlength=len(names)),
                np.bincount(index[present], values[present], minlength=len(names)),
                np.bincount(index[present], values[present] ** 2, minlength=len(names)),
            ],
            axis=1,
        )
    for name, categorical in reference.categorical.items():
        kept = {value: position for position, value in enumerate(categorical.values[:-2])}
        other, missing = len(categorical.values) - 2, len(categorical.values) - 1
        value = pl.col(name).cast(pl.String)
        bin_of = (
            frame.select(
                pl.when(value.is_null())
                .then(missing)
                .otherwise(value.replace_strict(kept, default=other, return_dtype=pl.Int64))
            )
            .to_series()
            .to_numpy()
        )
        counts[name] = _per_stratum(index, bin_of, len(names), len(categorical.values))
    return {
        stratum: Stratum(
            {name: tuple(int(c) for c in rows[position]) for name, rows in counts.items()},
            {
                name: (int(m[position, 0]), float(m[position, 1]), float(m[position, 2]))
                for name, m in moments.items()
            },
        )
        for position, stratum in enumerate(names)
    }


def _per_stratum(index: np.ndarray, bin_of: np.ndarray, strata: int, bins: int) -> np.ndarray:
    """(strata, bins): the rows of each stratum in each bin."""
    return np.bincount(index * bins + bin_of, minlength=strata * bins).reshape(strata, bins)


def numeric_values(column: pl.Series) -> np.ndarray:
    """Float64 values with NaN for every missing one (null, NaN, ±inf)."""
    values = column.cast(pl.Float64).to_numpy().astype(np.float64, copy=True)
    values[~np.isfinite(values)] = np.nan
    return values


def numeric_shares(values: np.ndarray, edges: Sequence[float]) -> np.ndarray:
    """Shares of len(edges) + 1 value bins, then missing; all zero for an empty column."""
    missing = np.isnan(values)
    value_bins = np.searchsorted(np.asarray(edges), values[~missing], side="right")
    counts = np.append(np.bincount(value_bins, minlength=len(edges) + 1), missing.sum())
    return counts / max(values.size, 1)


def _numeric_profile(column: pl.Series, bins: int) -> NumericProfile:
    values = numeric_values(column)
    present = values[~np.isnan(values)]
    edges = (
        np.unique(np.quantile(present, np.arange(1, bins) / bins)) if present.size else np.empty(0)
    )
    mean, sd = mean_and_sd(present.size, float(present.sum()), float((present**2).sum()))
    return NumericProfile(
        edges=tuple(float(edge) for edge in edges),
        shares=tuple(float(share) for share in numeric_shares(values, edges)),
        rows=column.len(),
        mean=mean,
        sd=sd,
    )


def _categorical_counts(column: pl.Series) -> dict[str, int]:
    """Rows per present value, as text (booleans become "true" / "false")."""
    present = column.drop_nulls().cast(pl.String)
    return {value: count for value, count in present.value_counts().iter_rows()}


def categorical_shares(column: pl.Series, values: Sequence[str]) -> np.ndarray:
    """Shares of `values` (kept values, OTHER, MISSING): anything not kept counts as OTHER."""
    counts = _categorical_counts(column)
    kept = [counts.pop(value, 0) for value in values[:-2]]
    shares = np.array([*kept, sum(counts.values()), column.null_count()], dtype=np.float64)
    return shares / max(column.len(), 1)


def _categorical_profile(column: pl.Series, min_share: float) -> CategoricalProfile:
    rows = max(column.len(), 1)
    counts = _categorical_counts(column)
    kept = sorted(
        (value for value, count in counts.items() if count / rows >= min_share),
        key=lambda value: (-counts[value], value),
    )
    values = (*kept, OTHER, MISSING)
    return CategoricalProfile(
        values=values,
        shares=tuple(float(share) for share in categorical_shares(column, values)),
        rows=column.len(),
    )


def require_columns(frame: pl.DataFrame, names: Sequence[str]) -> None:
    absent = [name for name in names if name not in frame.columns]
    if absent:
        raise ValueError(f"no column {absent} in the frame (has {frame.columns})")
