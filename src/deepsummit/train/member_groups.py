"""Calibration by member group: does a group's mean P match how often its members summited?

A user asks about one member, and belongs to groups: an age band, a sex, hired staff or not, an
oxygen plan, a team role, a nationality. A model can rank members well and still answer a whole
group too high (the oldest climbers, say). So held-out member rows are judged group by group:
the members, the observed summit rate, and per model the mean P and its gap, mean P − observed.

The summary figure is the *group error*: the member-weighted mean |mean P − observed| over the
groups of at least `min_members` members (each group's weight is its members). Intervals come
from one bootstrap over expeditions (deepsummit/train/bootstrap.py): every replicate recomputes
each group's rates and the group error, and two models are compared paired on the same
replicates.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

import numpy as np
import polars as pl

from deepsummit.contracts.member_groups import member_groups
from deepsummit.train.bootstrap import Interval, interval, replicate_weights
from deepsummit.train.comparison import difference_metrics, difference_name, slug

ALL_PEAKS = "all peaks"


@dataclass(frozen=True)
class GroupRow:
    family: str  # "age"
    group: str  # "60 and over"
    members: int
    observed: Interval  # the summit rate
    mean_probability: dict[str, Interval]  # per model
    gap: dict[str, Interval]  # per model: mean P − observed
    counted: bool  # at least the minimum members: part of the group error

    def as_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class GroupCalibration:
    """One scope's groups (all peaks, or one peak) for every model."""

    scope: str
    models: tuple[str, ...]  # the first is the one the differences are taken from
    rows: tuple[GroupRow, ...]
    error: dict[str, Interval]  # group error per model
    differences: dict[str, Interval]  # first − other, group error (below 0: first is closer)
    min_members: int

    def metrics(self, prefix: str) -> dict[str, float]:
        values: dict[str, float] = {}
        for name in self.models:
            values |= self.error[name].as_dict(f"{prefix}{slug(name)}_group_error")
        return values | difference_metrics(self.differences, f"{prefix}group_error_difference_")

    def worst(self, model: str, count: int) -> list[GroupRow]:
        """The counted groups where `model` is furthest from the observed rate."""
        counted = [row for row in self.rows if row.counted]
        return sorted(counted, key=lambda row: -abs(row.gap[model].estimate))[:count]

    def markdown(self) -> str:
        lines = [
            f"{self.scope}: group error (member-weighted mean |mean P − observed| over groups of "
            f"at least {self.min_members} members):",
            "",
            "| model | group error |",
            "| --- | --- |",
            *(f"| {m} | {self.error[m].render()} |" for m in self.models),
            "",
            *(f"- {name}: {diff.render(4)} (paired)" for name, diff in self.differences.items()),
            "",
            "| group | members | observed | "
            + " | ".join(f"{m} mean P | {m} gap" for m in self.models)
            + " |",
            "| --- | ---: | --- | " + " | ".join("--- | ---" for _ in self.models) + " |",
        ]
        for row in self.rows:
            cells = " | ".join(
                f"{row.mean_probability[m].render()} | {_signed(row.gap[m])}" for m in self.models
            )
            note = "" if row.counted else " (too few to count)"
            lines.append(
                f"| {row.family}: {row.group}{note} | {row.members:,} | {row.observed.render()} "
                f"| {cells} |"
            )
        return "\n".join(lines) + "\n"

    def as_json(self) -> dict:
        return {
            "scope": self.scope,
            "models": list(self.models),
            "min_members": self.min_members,
            "error": {m: asdict(i) for m, i in self.error.items()},
            "differences": {n: asdict(i) for n, i in self.differences.items()},
            "rows": [row.as_json() for row in self.rows],
        }

    @classmethod
    def from_json(cls, document: Mapping) -> GroupCalibration:
        def intervals(values: Mapping) -> dict[str, Interval]:
            return {name: Interval(**value) for name, value in values.items()}

        rows = tuple(
            GroupRow(
                family=row["family"],
                group=row["group"],
                members=row["members"],
                observed=Interval(**row["observed"]),
                mean_probability=intervals(row["mean_probability"]),
                gap=intervals(row["gap"]),
                counted=row["counted"],
            )
            for row in document["rows"]
        )
        return cls(
            scope=document["scope"],
            models=tuple(document["models"]),
            rows=rows,
            error=intervals(document["error"]),
            differences=intervals(document["differences"]),
            min_members=document["min_members"],
        )


def _signed(value: Interval) -> str:
    if np.isnan(value.estimate):
        return "–"
    return f"{value.estimate:+.3f} [{value.low:+.3f}, {value.high:+.3f}]"


def group_calibration(
    rows: pl.DataFrame,
    models: Mapping[str, np.ndarray],
    scope: str,
    min_members: int,
) -> GroupCalibration:
    """`rows`: held-out member rows (expid, year, label and `MEMBER_COLUMNS`); `models`: each
    model's P on them, in the same order."""
    labels = rows["label"].cast(pl.Float64).to_numpy()
    replicates = replicate_weights(
        rows.select(pl.format("{}/{}", "expid", "year")).to_series().to_numpy()
    )
    ones = np.ones((1, len(labels)))
    names = tuple(models)
    group_rows, counted_masks = [], []
    for family, column in member_groups(rows).to_dict().items():
        values = column.to_numpy()
        for group in column.drop_nulls().unique(maintain_order=True).sort().to_list():
            mask = values == group
            members = int(mask.sum())
            counted = members >= min_members
            if counted:
                counted_masks.append(mask)
            observed = _rate(labels, mask, ones, replicates)
            mean_p = {m: _rate(np.asarray(models[m]), mask, ones, replicates) for m in names}
            group_rows.append(
                GroupRow(
                    family=family,
                    group=group,
                    members=members,
                    observed=interval(*observed),
                    mean_probability={m: interval(*mean_p[m]) for m in names},
                    gap={
                        m: interval(mean_p[m][0] - observed[0], mean_p[m][1] - observed[1])
                        for m in names
                    },
                    counted=counted,
                )
            )
    errors = {
        m: _group_error(labels, np.asarray(models[m]), counted_masks, replicates) for m in names
    }
    first, *others = names
    return GroupCalibration(
        scope=scope,
        models=names,
        rows=tuple(group_rows),
        error={m: interval(*errors[m]) for m in names},
        differences={
            difference_name(first, other): interval(
                errors[first][0] - errors[other][0], errors[first][1] - errors[other][1]
            )
            for other in others
        },
        min_members=min_members,
    )


def _rate(
    values: np.ndarray, mask: np.ndarray, ones: np.ndarray, replicates: np.ndarray
) -> tuple[float, np.ndarray]:
    """The mean of `values` over the rows of `mask`: as drawn, and in every replicate (NaN in a
    replicate that drew none of them)."""
    point = float(values[mask].mean())
    weights = replicates[:, mask]
    with np.errstate(invalid="ignore", divide="ignore"):
        return point, (weights @ values[mask]) / weights.sum(axis=1)


def _group_error(
    labels: np.ndarray, probabilities: np.ndarray, masks: list[np.ndarray], replicates: np.ndarray
) -> tuple[float, np.ndarray]:
    """Member-weighted mean |mean P − observed| over the groups `masks`: as drawn, and in
    every replicate (each group weighted by its members drawn)."""
    if not masks:  # no group large enough: no figure, never a silent zero
        return float("nan"), np.full(len(replicates), np.nan)
    members = np.array([mask.sum() for mask in masks], dtype=np.float64)
    gaps = np.array([abs(probabilities[m].mean() - labels[m].mean()) for m in masks])
    drawn = np.stack([replicates[:, m].sum(axis=1) for m in masks], axis=1)  # (R, groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        replicate_gaps = np.stack(
            [
                np.abs(replicates[:, m] @ (probabilities[m] - labels[m])) / drawn[:, i]
                for i, m in enumerate(masks)
            ],
            axis=1,
        )
    weighted = np.nansum(np.nan_to_num(replicate_gaps) * drawn, axis=1) / drawn.sum(axis=1)
    return float(np.average(gaps, weights=members)), weighted


def calibration_by_scope(
    rows: pl.DataFrame,
    models: Mapping[str, np.ndarray],
    min_members: int,
    separate_peaks: int,
) -> dict[str, GroupCalibration]:
    """The groups on all peaks, then on each of the `separate_peaks` peaks with the most
    members among `rows` (which must carry `peakid`)."""
    scopes = {ALL_PEAKS: group_calibration(rows, models, ALL_PEAKS, min_members)}
    busiest = rows["peakid"].value_counts(sort=True).head(separate_peaks)["peakid"].to_list()
    for peak in busiest:
        mask = (rows["peakid"] == peak).to_numpy()
        scopes[peak] = group_calibration(
            rows.filter(pl.Series(mask)),
            {m: np.asarray(p)[mask] for m, p in models.items()},
            peak,
            min_members,
        )
    return scopes
