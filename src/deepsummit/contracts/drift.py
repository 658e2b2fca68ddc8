"""Input drift: how far the newest records have moved from the champion's training split.

`profile` summarises a reference frame (the champion's training split) as a small
`DistributionProfile` that can be saved beside the model; `compare` measures a current frame (the
newest season's attempts, a planned outlook, their weather rows) against it and returns a
`DriftReport` with one `FeatureDrift` per feature. Columns are only numeric or categorical here:
tabular features and weather variables are treated alike, each frame at its own grain (one row
per attempt, or per attempt and weather token).

A profile may also keep its rows' counts per stratum (a named part of the reference, e.g. a
season's week: `profile(..., strata=COLUMN)`), on the same bins; `within(strata)` is then the
profile of those strata's rows alone, so that a current frame is compared with the part of the
reference it should resemble (deepsummit/contracts/monitor.py: the same season and weeks).

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
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass, field
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
MODERATE_SHIFT_SD = 2.0
MAJOR_SHIFT_SD = 3.0
DEFAULT_SHIFT_THRESHOLD = MAJOR_SHIFT_SD
OTHER = "(other)"
MISSING = "(missing)"
NOT_ENOUGH_ROWS = "not enough rows"
# The means, deviations and strata were added as keys a reader of format 1 ignores: a profile
# stays readable by the releases before them (a registered model is served by either).
PROFILE_FORMAT = 1

Kind = Literal["numeric", "categorical"]


@dataclass(frozen=True)
class NumericProfile:
    """Reference bins of one numeric column, and the mean and deviation of its values."""

    edges: tuple[float, ...]  # interior cut points, increasing
    shares: tuple[float, ...]  # len(edges) + 2: the value bins in order, then missing
    rows: int
    mean: float | None = None  # of the present values; None without any (or an older file)
    sd: float | None = None  # their sample standard deviation; None below two values


@dataclass(frozen=True)
class CategoricalProfile:
    """Reference shares of one categorical column."""

    values: tuple[str, ...]  # the kept values by descending share, then OTHER, then MISSING
    shares: tuple[float, ...]  # one per entry of `values`
    rows: int


@dataclass(frozen=True)
class Stratum:
    """The reference rows of one stratum, on the profile's bins: per feature the rows in each
    bin (in the order of its shares), per numeric feature (present rows, Σx, Σx²)."""

    counts: dict[str, tuple[int, ...]]
    moments: dict[str, tuple[int, float, float]]


@dataclass(frozen=True)
class DistributionProfile:
    """What a reference frame looked like, per feature; small enough to ship with a model."""

    numeric: dict[str, NumericProfile]
    categorical: dict[str, CategoricalProfile]
    description: str = ""  # which rows, e.g. "training split, seasons ≤ 2012"
    strata: dict[str, Stratum] = field(default_factory=dict)

    @property
    def features(self) -> tuple[str, ...]:
        return (*self.numeric, *self.categorical)

    def merged(self, other: DistributionProfile) -> DistributionProfile:
        """One profile of both: e.g. the attempts' tabular columns and their weather rows
        (a stratum of both holds both's features)."""
        shared = set(self.features) & set(other.features)
        if shared:
            raise ValueError(f"both profiles describe {sorted(shared)}")
        empty = Stratum({}, {})

        def both(name: str) -> Stratum:
            mine, theirs = self.strata.get(name, empty), other.strata.get(name, empty)
            return Stratum({**mine.counts, **theirs.counts}, {**mine.moments, **theirs.moments})

        return DistributionProfile(
            numeric={**self.numeric, **other.numeric},
            categorical={**self.categorical, **other.categorical},
            description=_joined(self.description, other.description),
            strata={name: both(name) for name in sorted({*self.strata, *other.strata})},
        )

    def within(self, strata: Collection[str], description: str) -> DistributionProfile:
        """The profile of the reference rows of `strata` alone (those this profile has), on the
        same bins; `description` says which rows they are."""
        kept = [self.strata[name] for name in sorted(set(strata) & set(self.strata))]

        def summed(feature: str, bins: int) -> np.ndarray:
            rows = [s.counts[feature] for s in kept if feature in s.counts]
            return np.sum(rows, axis=0) if rows else np.zeros(bins)

        numeric = {}
        for name, whole in self.numeric.items():
            counts = summed(name, len(whole.shares))
            moments = [s.moments[name] for s in kept if name in s.moments]
            mean, sd = _mean_and_sd(*(sum(m[i] for m in moments) for i in range(3)))
            numeric[name] = NumericProfile(
                whole.edges, _shares(counts), int(counts.sum()), mean, sd
            )
        categorical = {}
        for name, whole in self.categorical.items():
            counts = summed(name, len(whole.shares))
            categorical[name] = CategoricalProfile(whole.values, _shares(counts), int(counts.sum()))
        return DistributionProfile(numeric, categorical, description)

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
                name: NumericProfile(
                    tuple(p["edges"]), tuple(p["shares"]), p["rows"], p.get("mean"), p.get("sd")
                )
                for name, p in document["numeric"].items()
            },
            categorical={
                name: CategoricalProfile(tuple(p["values"]), tuple(p["shares"]), p["rows"])
                for name, p in document["categorical"].items()
            },
            description=document["description"],
            strata={
                name: Stratum(
                    {feature: tuple(c) for feature, c in s["counts"].items()},
                    {feature: (m[0], m[1], m[2]) for feature, m in s["moments"].items()},
                )
                for name, s in document.get("strata", {}).items()
            },
        )


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
            reference=_joined(self.reference, other.reference),
            current=_joined(self.current, other.current),
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
    _require_columns(frame, [*numeric, *categorical, *([strata] if strata else [])])
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
        values = _numeric_values(frame[name])
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
    _require_columns(current, features)
    rows = []
    for name in features:
        whole = reference.numeric[name]
        values = _numeric_values(current[name])
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
    mean, sd = _mean_and_sd(present.size, float(present.sum()), float((present**2).sum()))
    return NumericProfile(
        edges=tuple(float(edge) for edge in edges),
        shares=tuple(float(share) for share in _numeric_shares(values, edges)),
        rows=column.len(),
        mean=mean,
        sd=sd,
    )


def _mean_and_sd(count: int, total: float, squares: float) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation from (n, Σx, Σx²); None where undefined."""
    if count < 1:
        return None, None
    mean = total / count
    if count < 2:
        return mean, None
    return mean, math.sqrt(max(squares - count * mean**2, 0.0) / (count - 1))


def _shares(counts: np.ndarray) -> tuple[float, ...]:
    return tuple(float(c) / max(float(counts.sum()), 1.0) for c in counts)


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
    # Drifted first, then by how far they moved; features not judged last, in their order.
    return sorted(
        rows, key=lambda row: (not row.drifted, math.inf if row._size is None else -row._size)
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
