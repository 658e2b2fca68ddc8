"""Checks the features table must pass before training may read it: a Pandera schema (types,
ranges, allowed values) and a Great Expectations suite (no unexpected nulls, label rate per
split within sane bounds). Results go to the run folder; a failure stops the stage with one
line naming the checks that failed.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pandera.polars as pa
import polars as pl

from deepsummit.core.errors import PipelineError
from deepsummit.core.inputs import RARE_FOLDS, TABULAR_INPUTS
from deepsummit.records import expectations as expectations_module
from deepsummit.records.expectations import validate_frame

if TYPE_CHECKING:
    from great_expectations.expectations import Expectation

from deepsummit.contracts.snapshot import SPLITS

# Where an attempt comes from: a row of the members file, or a climbing member an expedition
# record counts (deepsummit/sql/features_attempt_candidates.sql).
RECORDS: tuple[str, ...] = ("member", "expedition")
# A split whose summit rate leaves these bounds means a broken join or label, not climbing.
LABEL_RATE_BOUNDS: tuple[float, float] = (0.05, 0.95)
# Never missing: keys, the label, and features every expedition and peak record carries.
REQUIRED_COLUMNS: tuple[str, ...] = (
    "expid", "member_id", "year", "smtdate", "weather_source", "record", "has_weather", "split",
    "label", "peakid", "season", "himal", "heightm",
)  # fmt: skip
# Missing now and then in a member's row (and then masked); mostly present all the same. A member
# an expedition record counts has none of them.
MOSTLY_PRESENT: dict[str, float] = {
    "age": 0.8,
    "sex": 0.95,
    "nationality": 0.95,
    "totmembers": 0.95,  # 0 members in the records means "not recorded": missing
}

NUMERIC_RANGES: dict[str, tuple[float, float | None]] = {
    "age": (1, 100),
    "prior_expeditions": (0, None),
    "prior_summits": (0, None),
    "highest_prev_altitude_m": (0, 8849),
    "totmembers": (0, None),
    "heightm": (0, 8849),
    "route_success_rate": (0, 1),
    "peak_success_rate": (0, 1),
    "staff_per_member": (0, None),
    "days_at_base_camp": (0, 120),
    "agency_success_rate": (0, 1),
    "day_of_year": (1, 366),
    # A push date lies in its season's three months or a month either side (the records stage
    # quarantines others): from 31 days before the opening to 121 days after.
    "days_in_season": (-31, 121),
}


def _range_check(low: float, high: float | None) -> pa.Check:
    return pa.Check.in_range(low, high) if high is not None else pa.Check.ge(low)


def features_schema() -> pa.DataFrameSchema:
    columns = {
        "expid": pa.Column(pl.String),
        "member_id": pa.Column(pl.String),
        "year": pa.Column(pl.Int32),
        "smtdate": pa.Column(pl.Date),
        "weather_source": pa.Column(pl.String),
        "record": pa.Column(pl.String, pa.Check.isin(RECORDS)),
        "has_weather": pa.Column(pl.Boolean),
        "role": pa.Column(pl.String, nullable=True),  # not an input: the member groups read it
        "split": pa.Column(pl.String, pa.Check.isin(SPLITS)),
        "label": pa.Column(pl.Boolean),
    }
    for feature in TABULAR_INPUTS:
        name = feature.name
        if feature.kind == "numeric":
            check = _range_check(*NUMERIC_RANGES[name])
            columns[name] = pa.Column(pl.Float64, check, nullable=name not in REQUIRED_COLUMNS)
        elif feature.kind == "categorical":
            columns[name] = pa.Column(pl.String, nullable=name not in REQUIRED_COLUMNS)
        else:
            columns[name] = pa.Column(pl.Int32, pa.Check.isin([0, 1]), nullable=True)
    for fold in RARE_FOLDS.values():
        columns[fold] = pa.Column(pl.String, nullable=True)
    return pa.DataFrameSchema(columns, strict=True, unique=["member_id", "year"])


def feature_expectations() -> list[Expectation]:
    """The Great Expectations suite over the features table."""
    gx = expectations_module.import_gx()
    expectations: list[Expectation] = [
        gx.expectations.ExpectColumnValuesToNotBeNull(column=name) for name in REQUIRED_COLUMNS
    ]
    expectations += [
        gx.expectations.ExpectColumnValuesToNotBeNull(
            column=name,
            mostly=share,
            row_condition='record=="member"',
            condition_parser="pandas",
        )
        for name, share in MOSTLY_PRESENT.items()
    ]
    expectations += [
        gx.expectations.ExpectColumnValuesToBeBetween(column=name, min_value=low, max_value=high)
        for name, (low, high) in NUMERIC_RANGES.items()
    ]
    expectations += [
        gx.expectations.ExpectColumnValuesToBeInSet(column="split", value_set=list(SPLITS)),
        gx.expectations.ExpectCompoundColumnsToBeUnique(column_list=["member_id", "year"]),
    ]
    low, high = LABEL_RATE_BOUNDS
    expectations += [
        gx.expectations.ExpectColumnMeanToBeBetween(
            column="label",
            min_value=low,
            max_value=high,
            row_condition=f'split=="{split}"',
            condition_parser="pandas",
        )
        for split in SPLITS
    ]
    return expectations


def validate_features(frame: pl.DataFrame, run_dir: Path) -> None:
    """Raise PipelineError (one line) unless the features table passes schema and suite."""
    try:
        features_schema().validate(frame, lazy=True)
    except pa.errors.SchemaErrors as errors:
        cases = errors.failure_cases.select("column", "check", "failure_case").unique().head(5)
        detail = "; ".join(f"{c}: {k} ({v})" for c, k, v in cases.iter_rows())
        raise PipelineError(f"features table fails its schema: {detail}") from None
    # GX reads pandas; a 0/1 label gives the label rate as the column mean.
    result = validate_frame(
        frame.with_columns(pl.col("label").cast(pl.Int8)),
        "features",
        feature_expectations(),
        run_dir,
    )
    if not result.success:
        raise PipelineError(
            f"features table fails expectations: {', '.join(result.failed)} "
            f"(details in {result.results_path})"
        )
