"""Input drift: how far the newest records have moved from the champion's training split.

`profile` summarises a reference frame (the champion's training split) as a small
`DistributionProfile` that can be saved beside the model; `compare` measures a current frame (the
newest season's attempts, a planned outlook, their weather rows) against it and returns a
`DriftReport` with one `FeatureDrift` per feature. Columns are only numeric or categorical here:
tabular features and weather variables are treated alike, each frame at its own grain (one row
per attempt, or per attempt and weather token).

Built in plain NumPy/Polars, not on a drift library. Of evidently 0.7.23, popmon 1.4.12,
deepchecks 0.19.1, whylogs 1.6.4, nannyml 0.13.1, alibi-detect 0.13.0, frouros 0.9.0 and
driftwatch 0.4.0, none both installs beside the pins and works on them. nannyml, alibi-detect
and frouros would downgrade pinned packages (lightgbm; numpy, pandas; numpy, matplotlib). Of
those that install, evidently and deepchecks fail at import on pandas 3 / scikit-learn 1.9,
whylogs fails on NumPy 2, and popmon cannot bin strings under pandas 3. driftwatch drops
out-of-range and missing values. All of them also need the raw reference rows at comparison
time; a small saved profile is what the model artifact can carry.

Bins, once for every column:
- numeric: cut at the interior quantiles of the reference's present values (probabilities
  1/bins … (bins−1)/bins, duplicates dropped), giving len(edges) + 1 value bins whose outer ones
  are open, (−∞, e₁) and [e_k, +∞), so values beyond the reference range still count; a value on
  an edge falls in the bin above it. Null, NaN and ±inf make one more bin, "missing".
- categorical: one bin per value holding at least `min_category_share` of the reference rows,
  then OTHER (rarer values, and values the reference never had), then MISSING (null).
Shares are fractions of all the column's rows, missing included, so each column's shares sum to 1.

Statistics:
- PSI = Σ_bins (c − r) · ln(c / r), with c and r the current and reference shares, each first
  raised to SHARE_FLOOR (1e-4) so that an empty bin adds a large finite term rather than ∞.
  Every term is ≥ 0. Conventions: < 0.1 stable, 0.1–0.25 moderate, ≥ 0.25 major.
- Categoricals also report the value whose share moved most (signed, current − reference).
- Sampling noise: two samples of one distribution give E[PSI] ≈ (k − 1)(1/n_ref + 1/n_cur), k the
  bins holding reference rows (PSI ≈ the χ² distance to second order). A feature is judged only
  when both sides have `min_rows` rows and that noise is at most MAX_NOISE_FRACTION of the
  threshold; otherwise it is "not enough rows", never drift. Without that, 60 planned attempts
  would show nationality (≈ 25 bins) at PSI ≈ 0.4 from sampling alone.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
import polars as pl

MODERATE_PSI = 0.1
MAJOR_PSI = 0.25
# The default warns on a major shift only. On the bundle, each year 2013–2018 against the
# seasons ≤ 2012 puts age at PSI 0.10–0.20: moderate moves are ordinary from year to year, and a
# warning at 0.1 would fire on every run.
DEFAULT_THRESHOLD = MAJOR_PSI
DEFAULT_MIN_ROWS = 50
DEFAULT_BINS = 10
DEFAULT_MIN_CATEGORY_SHARE = 0.01  # also bounds a categorical's profile to ≤ 100 values
SHARE_FLOOR = 1e-4
MAX_NOISE_FRACTION = 0.25
OTHER = "(other)"
MISSING = "(missing)"
NOT_ENOUGH_ROWS = "not enough rows"
PROFILE_FORMAT = 1

Kind = Literal["numeric", "categorical"]


@dataclass(frozen=True)
class NumericProfile:
    """Reference bins of one numeric column."""

    edges: tuple[float, ...]  # interior cut points, increasing
    shares: tuple[float, ...]  # len(edges) + 2: the value bins in order, then missing
    rows: int


@dataclass(frozen=True)
class CategoricalProfile:
    """Reference shares of one categorical column."""

    values: tuple[str, ...]  # the kept values by descending share, then OTHER, then MISSING
    shares: tuple[float, ...]  # one per entry of `values`
    rows: int


@dataclass(frozen=True)
class DistributionProfile:
    """What a reference frame looked like, per feature; small enough to ship with a model."""

    numeric: dict[str, NumericProfile]
    categorical: dict[str, CategoricalProfile]
    description: str = ""  # which rows, e.g. "training split, seasons ≤ 2012"

    @property
    def features(self) -> tuple[str, ...]:
        return (*self.numeric, *self.categorical)

    def merged(self, other: DistributionProfile) -> DistributionProfile:
        """One profile of both: e.g. the attempts' tabular columns and their weather rows."""
        shared = set(self.features) & set(other.features)
        if shared:
            raise ValueError(f"both profiles describe {sorted(shared)}")
        return DistributionProfile(
            numeric={**self.numeric, **other.numeric},
            categorical={**self.categorical, **other.categorical},
            description=_joined(self.description, other.description),
        )

    def to_json(self) -> str:
        document = {"format": PROFILE_FORMAT, **asdict(self)}
        # allow_nan=False: a profile is strict JSON, readable by any consumer of the artifact.
        return json.dumps(document, indent=1, allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> DistributionProfile:
        document = json.loads(text)
        if document.get("format") != PROFILE_FORMAT:
            raise ValueError(f"drift profile format {document.get('format')!r}, expected 1")
        return cls(
            numeric={
                name: NumericProfile(tuple(p["edges"]), tuple(p["shares"]), p["rows"])
                for name, p in document["numeric"].items()
            },
            categorical={
                name: CategoricalProfile(tuple(p["values"]), tuple(p["shares"]), p["rows"])
                for name, p in document["categorical"].items()
            },
            description=document["description"],
        )


@dataclass(frozen=True)
class FeatureDrift:
    """One feature's comparison. `psi` is the statistic, None when there were too few rows."""

    feature: str
    kind: Kind
    psi: float | None
    drifted: bool  # psi > the report's threshold
    reference_rows: int
    current_rows: int
    reference_missing: float  # share of rows missing
    current_missing: float
    expected_noise: float | None  # the PSI sampling alone would give at these row counts
    shifted_value: str | None = None  # categorical: the value whose share moved most
    share_change: float | None = None  # its current − reference share

    @property
    def status(self) -> str:
        if self.psi is None:
            return NOT_ENOUGH_ROWS
        if self.psi >= MAJOR_PSI:
            return "major"
        return "moderate" if self.psi >= MODERATE_PSI else "stable"


@dataclass(frozen=True)
class DriftReport:
    """Every compared feature, in the order compared, and how they were judged."""

    rows: tuple[FeatureDrift, ...]
    threshold: float
    min_rows: int
    reference: str  # the reference profile's description
    current: str  # which current rows were compared

    @property
    def drifted(self) -> tuple[str, ...]:
        """Names of the drifted features, most drifted first."""
        return tuple(row.feature for row in _most_drifted_first(self.rows) if row.drifted)

    def combined(self, other: DriftReport) -> DriftReport:
        """One report of two comparisons made at different grains against one profile."""
        if (self.threshold, self.min_rows) != (other.threshold, other.min_rows):
            raise ValueError("drift reports judged with different thresholds or min_rows")
        shared = {row.feature for row in self.rows} & {row.feature for row in other.rows}
        if shared:
            raise ValueError(f"both drift reports compare {sorted(shared)}")
        return DriftReport(
            rows=self.rows + other.rows,
            threshold=self.threshold,
            min_rows=self.min_rows,
            reference=_joined(self.reference, other.reference),
            current=_joined(self.current, other.current),
        )

    def warning(self, listed: int = 5) -> str | None:
        """One line for the run summary, or None when nothing drifted."""
        drifted = [row for row in _most_drifted_first(self.rows) if row.drifted]
        if not drifted:
            return None
        named = ", ".join(f"{row.feature} {row.psi:.2f}" for row in drifted[:listed])
        more = f" and {len(drifted) - listed} more" if len(drifted) > listed else ""
        return (
            f"input drift: {len(drifted)} of {len(self.rows)} features above PSI "
            f"{self.threshold:g} ({self.current} against {self.reference}): {named}{more}"
        )

    def markdown(self) -> str:
        """A table for the run's artifact: drifted features marked and first, then by PSI."""
        lines = [
            f"Compared **{_cell(self.current) or 'current rows'}** with "
            f"**{_cell(self.reference) or 'the reference profile'}**. "
            f"Drifted = PSI above {self.threshold:g} ({MODERATE_PSI:g} moderate, "
            f"{MAJOR_PSI:g} major); a feature is judged with {self.min_rows} rows on each side "
            "or more, and enough that sampling noise stays well under the threshold.",
            "",
            "| | feature | kind | PSI | level | rows reference → current "
            "| missing reference → current | largest share change |",
            "| --- | --- | --- | ---: | --- | ---: | ---: | --- |",
        ]
        for row in _most_drifted_first(self.rows):
            psi = "–" if row.psi is None else f"{row.psi:.3f}"
            change = (
                ""
                if row.shifted_value is None or row.share_change is None
                else f"{_cell(row.shifted_value)} {100 * row.share_change:+.1f} pp"
            )
            lines.append(
                f"| {'**drifted**' if row.drifted else ''} | {_cell(row.feature)} | {row.kind} "
                f"| {psi} | {row.status} | {row.reference_rows:,} → {row.current_rows:,} "
                f"| {row.reference_missing:.1%} → {row.current_missing:.1%} | {change} |"
            )
        return "\n".join(lines)

    def metrics(self) -> dict[str, float]:
        """`drift_psi_<feature>` for MLflow; features not judged (too few rows) are left out."""
        return {f"drift_psi_{row.feature}": row.psi for row in self.rows if row.psi is not None}

    def as_dict(self) -> dict[str, Any]:
        return {
            "reference": self.reference,
            "current": self.current,
            "threshold": self.threshold,
            "min_rows": self.min_rows,
            "drifted": list(self.drifted),
            "features": [asdict(row) | {"status": row.status} for row in self.rows],
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=1, allow_nan=False)


def profile(
    frame: pl.DataFrame,
    numeric: Sequence[str],
    categorical: Sequence[str],
    bins: int = DEFAULT_BINS,
    *,
    min_category_share: float = DEFAULT_MIN_CATEGORY_SHARE,
    description: str = "",
) -> DistributionProfile:
    """The reference distribution of each named column of `frame` (see the module docstring)."""
    if bins < 2:
        raise ValueError(f"bins must be at least 2, got {bins}")
    both = set(numeric) & set(categorical)
    if both:
        raise ValueError(f"{sorted(both)} named both numeric and categorical")
    _require_columns(frame, [*numeric, *categorical])
    return DistributionProfile(
        numeric={name: _numeric_profile(frame[name], bins) for name in numeric},
        categorical={
            name: _categorical_profile(frame[name], min_category_share) for name in categorical
        },
        description=description,
    )


def compare(
    reference: DistributionProfile,
    current: pl.DataFrame,
    threshold: float = DEFAULT_THRESHOLD,
    *,
    features: Sequence[str] | None = None,
    min_rows: int = DEFAULT_MIN_ROWS,
    description: str = "",
) -> DriftReport:
    """Compare `current` with `reference` on `features` (default: all the profile's features).

    A feature drifts when its PSI is above `threshold`; it is judged only with at least
    `min_rows` rows on both sides and a sampling noise of at most MAX_NOISE_FRACTION × threshold.
    `description` says which current rows these are (it heads the report).
    """
    if min_rows < 1:
        raise ValueError(f"min_rows must be at least 1, got {min_rows}")
    names = reference.features if features is None else tuple(features)
    unknown = [name for name in names if name not in reference.features]
    if unknown:
        raise ValueError(f"the drift profile has no {unknown}")
    _require_columns(current, names)
    rows = tuple(
        _feature_drift(name, reference, current[name], threshold, min_rows) for name in names
    )
    return DriftReport(rows, threshold, min_rows, reference.description, description)


def _feature_drift(
    name: str,
    reference: DistributionProfile,
    column: pl.Series,
    threshold: float,
    min_rows: int,
) -> FeatureDrift:
    kind: Kind
    if name in reference.numeric:
        kind, profile_ = "numeric", reference.numeric[name]
        current_shares = _numeric_shares(_numeric_values(column), profile_.edges)
    else:
        kind, profile_ = "categorical", reference.categorical[name]
        current_shares = _categorical_shares(column, profile_.values)
    reference_shares = np.array(profile_.shares)
    n_reference, n_current = profile_.rows, column.len()

    noise = None
    if min(n_reference, n_current) >= min_rows:
        bins_held = int(np.count_nonzero(reference_shares))
        noise = max(bins_held - 1, 0) * (1 / n_reference + 1 / n_current)
    judged = noise is not None and noise <= MAX_NOISE_FRACTION * threshold

    psi = _psi(reference_shares, current_shares) if judged else None
    shifted_value = share_change = None
    if judged and kind == "categorical":
        change = current_shares - reference_shares
        moved = int(np.argmax(np.abs(change)))
        shifted_value, share_change = profile_.values[moved], float(change[moved])
    return FeatureDrift(
        feature=name,
        kind=kind,
        psi=psi,
        drifted=psi is not None and psi > threshold,
        reference_rows=n_reference,
        current_rows=n_current,
        reference_missing=float(reference_shares[-1]),
        current_missing=float(current_shares[-1]),
        expected_noise=noise,
        shifted_value=shifted_value,
        share_change=share_change,
    )


def _psi(reference_shares: np.ndarray, current_shares: np.ndarray) -> float:
    r = np.maximum(reference_shares, SHARE_FLOOR)
    c = np.maximum(current_shares, SHARE_FLOOR)
    return float(np.sum((c - r) * np.log(c / r)))


def _numeric_values(column: pl.Series) -> np.ndarray:
    """Float64 values with NaN for every missing one (null, NaN, ±inf)."""
    values = column.cast(pl.Float64).to_numpy().astype(np.float64, copy=True)
    values[~np.isfinite(values)] = np.nan
    return values


def _numeric_shares(values: np.ndarray, edges: Sequence[float]) -> np.ndarray:
    """Shares of len(edges) + 1 value bins, then missing; all zero for an empty column."""
    missing = np.isnan(values)
    value_bins = np.searchsorted(np.asarray(edges), values[~missing], side="right")
    counts = np.append(np.bincount(value_bins, minlength=len(edges) + 1), missing.sum())
    return counts / max(values.size, 1)


def _numeric_profile(column: pl.Series, bins: int) -> NumericProfile:
    values = _numeric_values(column)
    present = values[~np.isnan(values)]
    edges = (
        np.unique(np.quantile(present, np.arange(1, bins) / bins)) if present.size else np.empty(0)
    )
    return NumericProfile(
        edges=tuple(float(edge) for edge in edges),
        shares=tuple(float(share) for share in _numeric_shares(values, edges)),
        rows=column.len(),
    )


def _categorical_counts(column: pl.Series) -> dict[str, int]:
    """Rows per present value, as text (booleans become "true" / "false")."""
    present = column.drop_nulls().cast(pl.String)
    return {value: count for value, count in present.value_counts().iter_rows()}


def _categorical_shares(column: pl.Series, values: Sequence[str]) -> np.ndarray:
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
        shares=tuple(float(share) for share in _categorical_shares(column, values)),
        rows=column.len(),
    )


def _most_drifted_first(rows: Sequence[FeatureDrift]) -> list[FeatureDrift]:
    # Drifted first, then by PSI; features not judged last, in their original order.
    return sorted(
        rows, key=lambda row: (not row.drifted, math.inf if row.psi is None else -row.psi)
    )


def _require_columns(frame: pl.DataFrame, names: Sequence[str]) -> None:
    absent = [name for name in names if name not in frame.columns]
    if absent:
        raise ValueError(f"no column {absent} in the frame (has {frame.columns})")


def _joined(first: str, second: str) -> str:
    """Two descriptions as one, each said once."""
    return "; ".join(dict.fromkeys(text for text in (first, second) if text))


def _cell(text: str) -> str:
    """Text safe inside a markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")
