"""What a reference frame looked like, per feature: a `DistributionProfile`, small enough to
ship with a model (deepsummit/contracts/artifact.py keeps the champion's training rows' one) and
read back as strict JSON. The drift package makes and compares them (deepsummit/drift/).

Numeric columns keep their bins (interior cut points) and the share of rows in each, missing
last, with the mean and deviation of the present values; categorical columns keep the share of
each kept value, then OTHER (rarer values, and values the reference never had), then MISSING.
A profile may also keep its rows' counts per stratum (a named part of the reference, e.g. a
season's week), on the same bins: `within(strata)` is the profile of those strata's rows alone.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from typing import Literal

import numpy as np

OTHER = "(other)"
MISSING = "(missing)"
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
            description=joined(self.description, other.description),
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
            mean, sd = mean_and_sd(*(sum(m[i] for m in moments) for i in range(3)))
            numeric[name] = NumericProfile(
                whole.edges, shares_of(counts), int(counts.sum()), mean, sd
            )
        categorical = {}
        for name, whole in self.categorical.items():
            counts = summed(name, len(whole.shares))
            categorical[name] = CategoricalProfile(
                whole.values, shares_of(counts), int(counts.sum())
            )
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


def mean_and_sd(count: int, total: float, squares: float) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation from (n, Σx, Σx²); None where undefined."""
    if count < 1:
        return None, None
    mean = total / count
    if count < 2:
        return mean, None
    return mean, math.sqrt(max(squares - count * mean**2, 0.0) / (count - 1))


def shares_of(counts: np.ndarray) -> tuple[float, ...]:
    return tuple(float(c) / max(float(counts.sum()), 1.0) for c in counts)


def joined(first: str, second: str) -> str:
    """Two descriptions as one, each said once."""
    return "; ".join(dict.fromkeys(text for text in (first, second) if text))
