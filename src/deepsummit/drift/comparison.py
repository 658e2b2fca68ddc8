"""How far a current frame has moved from a reference profile: a `DriftReport` with one
`FeatureDrift` per feature (deepsummit/drift/monitor.py says which frames are compared).

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
- Mean shift (`compare_shift`), for rows that are not independent draws: the current mean minus
  the reference mean, in reference standard deviations. The weather rows of one outlook, or of
  one season, are a single year's weather seen through overlapping windows: their values bunch
  in a few bins, so PSI is large whatever the year (13 of 16 variables above 0.25 for an
  ordinary May on Everest), while the sampling noise above assumes rows drawn apart. Judged with
  `min_rows` present reference rows; drifted beyond `shift_threshold` (3 SD by default: among
  the bundle's own 796 peak-seasons with weather, against the training rows of the same season
  and weeks, one mean passed 3 SD and 0.9 % passed 2 SD).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import polars as pl

from deepsummit.contracts.distribution import DistributionProfile, Kind, joined
from deepsummit.drift.profiling import (
    categorical_shares,
    numeric_shares,
    numeric_values,
    require_columns,
)

MODERATE_PSI = 0.1
MAJOR_PSI = 0.25
# The default warns on a major shift only. On the bundle, each year 2013–2018 against the
# seasons ≤ 2012 puts age at PSI 0.10–0.20: moderate moves are ordinary from year to year, and a
# warning at 0.1 would fire on every run.
DEFAULT_THRESHOLD = MAJOR_PSI
DEFAULT_MIN_ROWS = 50
SHARE_FLOOR = 1e-4
MAX_NOISE_FRACTION = 0.25
MODERATE_SHIFT_SD = 2.0
MAJOR_SHIFT_SD = 3.0
DEFAULT_SHIFT_THRESHOLD = MAJOR_SHIFT_SD
NOT_ENOUGH_ROWS = "not enough rows"


@dataclass(frozen=True)
class FeatureDrift:
    """One feature's comparison: by `psi`, or by `shift_sd` for a feature compared by its mean
    (`compare_shift`); the statistic is None when there were too few rows."""

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
    shift_sd: float | None = None  # compared by its mean: current − reference, in reference SDs

    @property
    def status(self) -> str:
        if self.shift_sd is not None:
            size, moderate, major = abs(self.shift_sd), MODERATE_SHIFT_SD, MAJOR_SHIFT_SD
        elif self.psi is not None:
            size, moderate, major = self.psi, MODERATE_PSI, MAJOR_PSI
        else:
            return NOT_ENOUGH_ROWS
        if size >= major:
            return "major"
        return "moderate" if size >= moderate else "stable"

    @property
    def statistic(self) -> str:
        """The statistic as text: "0.31" (PSI), "+4.2 SD" (mean shift), "–" (not judged)."""
        if self.shift_sd is not None:
            return f"{self.shift_sd:+.1f} SD"
        return "–" if self.psi is None else f"{self.psi:.2f}"

    @property
    def _size(self) -> float | None:
        """How far it moved, to order features by: PSI, or the shift in SD (about PSI's scale
        squared: a normal shifted by d SD has PSI ≈ d²)."""
        return self.shift_sd**2 if self.shift_sd is not None else self.psi


@dataclass(frozen=True)
class DriftReport:
    """Every compared feature, in the order compared, and how they were judged."""

    rows: tuple[FeatureDrift, ...]
    threshold: float
    min_rows: int
    reference: str  # the reference profile's description
    current: str  # which current rows were compared
    shift_threshold: float | None = None  # of the features compared by their mean (None: none)

    @property
    def drifted(self) -> tuple[str, ...]:
        """Names of the drifted features, most drifted first."""
        return tuple(row.feature for row in _most_drifted_first(self.rows) if row.drifted)

    def combined(self, other: DriftReport) -> DriftReport:
        """One report of two comparisons made at different grains against one profile."""
        if (self.threshold, self.min_rows) != (other.threshold, other.min_rows):
            raise ValueError("drift reports judged with different thresholds or min_rows")
        shifts = {t for t in (self.shift_threshold, other.shift_threshold) if t is not None}
        if len(shifts) > 1:
            raise ValueError("drift reports judged with different shift thresholds")
        shared = {row.feature for row in self.rows} & {row.feature for row in other.rows}
        if shared:
            raise ValueError(f"both drift reports compare {sorted(shared)}")
        return DriftReport(
            rows=self.rows + other.rows,
            threshold=self.threshold,
            min_rows=self.min_rows,
            reference=joined(self.reference, other.reference),
            current=joined(self.current, other.current),
            shift_threshold=next(iter(shifts), None),
        )

    @property
    def thresholds(self) -> str:
        """What drifting means here, e.g. "PSI above 0.25, a mean beyond 3 SD"."""
        judged_by_psi = any(row.shift_sd is None for row in self.rows)
        return ", ".join(
            [
                *([f"PSI above {self.threshold:g}"] if judged_by_psi else []),
                *([f"a mean beyond {self.shift_threshold:g} SD"] if self.shift_threshold else []),
            ]
        )

    def warning(self, listed: int = 5) -> str | None:
        """One line for the run summary, or None when nothing drifted."""
        drifted = [row for row in _most_drifted_first(self.rows) if row.drifted]
        if not drifted:
            return None
        named = ", ".join(f"{row.feature} {row.statistic}" for row in drifted[:listed])
        more = f" and {len(drifted) - listed} more" if len(drifted) > listed else ""
        return (
            f"input drift: {len(drifted)} of {len(self.rows)} features drifted "
            f"({self.thresholds}; {self.current} against {self.reference}): {named}{more}"
        )

    def markdown(self) -> str:
        """A table for the run's artifact: drifted features marked and first, then by PSI."""
        by_shift = (
            f"; a feature compared by its mean drifts beyond {self.shift_threshold:g} of the "
            f"reference's standard deviations ({MODERATE_SHIFT_SD:g} moderate, "
            f"{MAJOR_SHIFT_SD:g} major)"
            if self.shift_threshold
            else ""
        )
        lines = [
            f"Compared **{_cell(self.current) or 'current rows'}** with "
            f"**{_cell(self.reference) or 'the reference profile'}**. "
            f"Drifted = PSI above {self.threshold:g} ({MODERATE_PSI:g} moderate, "
            f"{MAJOR_PSI:g} major){by_shift}; a feature is judged with {self.min_rows} rows on "
            "each side or more, and enough that sampling noise stays well under the threshold.",
            "",
            "| | feature | kind | PSI / mean shift | level | rows reference → current "
            "| missing reference → current | largest share change |",
            "| --- | --- | --- | ---: | --- | ---: | ---: | --- |",
        ]
        for row in _most_drifted_first(self.rows):
            statistic = f"{row.psi:.3f}" if row.psi is not None else row.statistic
            change = (
                ""
                if row.shifted_value is None or row.share_change is None
                else f"{_cell(row.shifted_value)} {100 * row.share_change:+.1f} pp"
            )
            lines.append(
                f"| {'**drifted**' if row.drifted else ''} | {_cell(row.feature)} | {row.kind} "
                f"| {statistic} | {row.status} | {row.reference_rows:,} → {row.current_rows:,} "
                f"| {row.reference_missing:.1%} → {row.current_missing:.1%} | {change} |"
            )
        return "\n".join(lines)

    def metrics(self) -> dict[str, float]:
        """`drift_psi_<feature>` (`drift_shift_sd_<feature>` for a feature compared by its
        mean) for MLflow; features not judged (too few rows) are left out."""
        return {
            **{f"drift_psi_{row.feature}": row.psi for row in self.rows if row.psi is not None},
            **{
                f"drift_shift_sd_{row.feature}": row.shift_sd
                for row in self.rows
                if row.shift_sd is not None
            },
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "reference": self.reference,
            "current": self.current,
            "threshold": self.threshold,
            "shift_threshold": self.shift_threshold,
            "min_rows": self.min_rows,
            "drifted": list(self.drifted),
            "features": [asdict(row) | {"status": row.status} for row in self.rows],
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=1, allow_nan=False)


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
    require_columns(current, names)
    rows = tuple(
        _feature_drift(name, reference, current[name], threshold, min_rows) for name in names
    )
    return DriftReport(rows, threshold, min_rows, reference.description, description)


def compare_shift(
    reference: DistributionProfile,
    current: pl.DataFrame,
    shift_threshold: float = DEFAULT_SHIFT_THRESHOLD,
    *,
    features: Sequence[str],
    threshold: float = DEFAULT_THRESHOLD,
    min_rows: int = DEFAULT_MIN_ROWS,
    description: str = "",
) -> DriftReport:
    """Compare the numeric `features` of `current` with `reference` by their means (see the
    module docstring): a feature drifts when its mean lies more than `shift_threshold` reference
    standard deviations away; judged with `min_rows` present reference values and one current
    value or more. `threshold` is the PSI threshold of the report's other features, recorded
    so that the reports combine."""
    unknown = [name for name in features if name not in reference.numeric]
    if unknown:
        raise ValueError(f"the drift profile has no numeric {unknown}")
    require_columns(current, features)
    rows = []
    for name in features:
        whole = reference.numeric[name]
        values = numeric_values(current[name])
        present = values[~np.isnan(values)]
        shift = None
        judged = whole.sd and whole.rows * (1 - whole.shares[-1]) >= min_rows and present.size
        if judged and whole.mean is not None and whole.sd is not None:
            shift = float((present.mean() - whole.mean) / whole.sd)
        rows.append(
            FeatureDrift(
                feature=name,
                kind="numeric",
                psi=None,
                drifted=shift is not None and abs(shift) > shift_threshold,
                reference_rows=whole.rows,
                current_rows=values.size,
                reference_missing=float(whole.shares[-1]),
                current_missing=float(1 - present.size / max(values.size, 1)),
                expected_noise=None,
                shift_sd=shift,
            )
        )
    return DriftReport(
        tuple(rows),
        threshold,
        min_rows,
        reference.description,
        description,
        shift_threshold=shift_threshold,
    )


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
        current_shares = numeric_shares(numeric_values(column), profile_.edges)
    else:
        kind, profile_ = "categorical", reference.categorical[name]
        current_shares = categorical_shares(column, profile_.values)
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


def _most_drifted_first(rows: Sequence[FeatureDrift]) -> list[FeatureDrift]:
    # Drifted first, then by how far they moved; features not judged last, in their order.
    return sorted(
        rows, key=lambda row: (not row.drifted, math.inf if row._size is None else -row._size)
    )


def _cell(text: str) -> str:
    """Text safe inside a markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")
