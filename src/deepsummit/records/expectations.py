"""Great Expectations suites over tables of a run: results kept as JSON, Data Docs as HTML.

Generic on purpose: any stage passes a Polars frame, a suite name and its expectations, and gets
back an `ExpectationResult`. GX runs in an ephemeral context on its pandas datasource (GX's SQL
route over DuckDB returns wrong metrics, see STACK.md), with progress bars and analytics off.
`clean_table_expectations` is the suite of the ingest stage's clean tables.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from deepsummit.records import validation
from deepsummit.records.data_docs import serve_assets_locally

if TYPE_CHECKING:
    from great_expectations.expectations import Expectation

DOCS_SITE = "run"
CRITICAL = "critical"  # GX's FailureSeverity of an expectation that must hold
WARNING = "warning"  # one whose failure is reported, not fatal


@dataclass(frozen=True)
class ExpectationResult:
    """The outcome of one suite on one frame."""

    suite_name: str
    success: bool
    evaluated: int
    successful: int
    failed: tuple[str, ...]  # "expectation_type(column)" of each unmet expectation
    results_path: Path  # the validation result as JSON
    docs_index: Path  # index.html of the Data Docs site of the run
    # The unmet ones of severity critical (GX's default): they stop a load; the others warn.
    blocking: tuple[str, ...] = ()

    def render(self) -> str:
        if self.success:
            state = "passed"
        elif self.blocking:
            state = "FAILED: " + ", ".join(self.failed)
        else:
            state = "passed with warnings: " + ", ".join(self.failed)
        return f"{self.suite_name}: {self.successful}/{self.evaluated} expectations {state}"


def validate_frame(
    frame: pl.DataFrame, suite_name: str, expectations: Sequence[Expectation], run_dir: Path
) -> ExpectationResult:
    """Run one suite over `frame`; results go to `<run_dir>/expectations/<suite>.json` and the
    Data Docs to `<run_dir>/data_docs/`."""
    return validate_frames({suite_name: (frame, expectations)}, run_dir)[suite_name]


def validate_frames(
    suites: Mapping[str, tuple[pl.DataFrame, Sequence[Expectation]]], run_dir: Path
) -> dict[str, ExpectationResult]:
    """Run several suites in one context, so one Data Docs index lists them all."""
    gx = import_gx()
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    docs_dir = run_dir / "data_docs"
    results_dir = run_dir / "expectations"
    results_dir.mkdir(parents=True, exist_ok=True)
    # The run folder is the only docs site (GX's default ephemeral site is a leftover temp dir).
    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
        analytics_enabled=False,
        progress_bars=ProgressBarsConfig(globally=False),
        data_docs_sites={
            DOCS_SITE: {
                "class_name": "SiteBuilder",
                "store_backend": {
                    "class_name": "TupleFilesystemStoreBackend",
                    "base_directory": str(docs_dir),
                },
                "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
            }
        },
    )
    context = gx.get_context(mode="ephemeral", project_config=config)
    datasource = context.data_sources.add_pandas("frames")
    outcomes: dict[str, Any] = {}
    for suite_name, (frame, expectations) in suites.items():
        batch = datasource.add_dataframe_asset(
            name=suite_name
        ).add_batch_definition_whole_dataframe("all rows")
        suite = context.suites.add(gx.ExpectationSuite(name=suite_name))
        for expectation in expectations:
            suite.add_expectation(expectation.copy(deep=True))
        definition = context.validation_definitions.add(
            gx.ValidationDefinition(name=suite_name, data=batch, suite=suite)
        )
        checkpoint = context.checkpoints.add(
            gx.Checkpoint(name=f"{suite_name} checkpoint", validation_definitions=[definition])
        )
        run = checkpoint.run(batch_parameters={"dataframe": frame.to_pandas()})
        outcomes[suite_name] = next(iter(run.run_results.values()))
    # Once, after every suite: each run stored its result, and one build renders them all and
    # the index (a docs action on each checkpoint rebuilt the whole site after every suite:
    # about 60% of the checkpoints' time in tests/records/test_ingest.py).
    context.build_data_docs(site_names=[DOCS_SITE])
    serve_assets_locally(docs_dir)
    return {
        name: _result(name, outcome, results_dir, docs_dir / "index.html")
        for name, outcome in outcomes.items()
    }


def import_gx() -> Any:
    """great_expectations, imported with analytics off (read once, at import time)."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations

    return great_expectations


def _result(suite_name: str, outcome: Any, results_dir: Path, index: Path) -> ExpectationResult:
    document = outcome.to_json_dict()
    path = results_dir / f"{suite_name}.json"
    path.write_text(json.dumps(document, indent=2, default=str))
    unmet = [item["expectation_config"] for item in document["results"] if not item["success"]]
    failed = tuple(_name(config) for config in unmet)
    blocking = tuple(
        _name(config) for config in unmet if config.get("severity", CRITICAL) == CRITICAL
    )
    statistics = document["statistics"]
    return ExpectationResult(
        suite_name=suite_name,
        success=bool(document["success"]),
        evaluated=int(statistics["evaluated_expectations"]),
        successful=int(statistics["successful_expectations"]),
        failed=failed,
        results_path=path,
        docs_index=index,
        blocking=blocking,
    )


def _name(config: dict[str, Any]) -> str:
    """An expectation as `expectation_type(column)`, the way the results name it."""
    return f"{config['type']}({_target(config['kwargs'])})"


def _target(kwargs: dict[str, Any]) -> str:
    columns = kwargs.get("column") or kwargs.get("column_list") or "table"
    return columns if isinstance(columns, str) else ", ".join(columns)


# Over 60 lines on purpose: the suite is declared whole, one expectation a line.
def clean_table_expectations(table: str) -> list[Expectation]:
    """The ingest suite of one clean table: what must hold of the table as a whole, a second,
    independent look after Pandera's row checks, run on the rows about to be written.

    Rows present, keys unique and not null, required columns not null, value sets and ranges
    block the load (severity critical): a table breaking them is not written. Fill rates and
    the summit rate describe the data rather than bound it (a small or unusual source may
    differ), so they warn (severity warning). The suite is declared here whole, one
    expectation a line, so the function is as long as the suite."""
    gx = import_gx()
    e = gx.expectations
    keys = list(validation.KEYS[table])
    columns = validation.MODELS[table].to_schema().columns
    required = [name for name, column in columns.items() if not column.nullable]
    common: list[Expectation] = [
        e.ExpectTableRowCountToBeBetween(min_value=1),
        e.ExpectCompoundColumnsToBeUnique(column_list=keys)
        if len(keys) > 1
        else e.ExpectColumnValuesToBeUnique(column=keys[0]),
        *[e.ExpectColumnValuesToNotBeNull(column=name) for name in required],
    ]
    years = {"min_value": validation.FIRST_YEAR, "max_value": validation.THIS_YEAR}
    seasons = list(validation.SEASONS)
    height = validation.MAX_RECORDED_HEIGHT_M
    members = validation.MAX_EXPEDITION_MEMBERS
    per_table: dict[str, list[Expectation]] = {
        "peaks": [
            e.ExpectColumnValuesToBeInSet(
                column="coord_source", value_set=list(validation.COORD_SOURCES)
            ),
            e.ExpectColumnValuesToBeBetween(
                column="heightm", min_value=0, max_value=validation.MAX_PEAK_HEIGHT_M
            ),
            e.ExpectColumnValuesToBeBetween(
                column="latitude",
                min_value=validation.NEPAL_LATITUDE[0],
                max_value=validation.NEPAL_LATITUDE[1],
            ),
            e.ExpectColumnValuesToBeBetween(
                column="longitude",
                min_value=validation.NEPAL_LONGITUDE[0],
                max_value=validation.NEPAL_LONGITUDE[1],
            ),
        ],
        "expeditions": [
            e.ExpectColumnValuesToBeBetween(column="year", **years),
            e.ExpectColumnValuesToBeInSet(column="season", value_set=seasons),
            e.ExpectColumnValuesToBeBetween(column="highpoint", min_value=0, max_value=height),
            *[
                e.ExpectColumnValuesToBeBetween(column=name, min_value=0, max_value=members)
                for name in ("totmembers", "smtmembers")
            ],
            e.ExpectColumnValuesToBeBetween(
                column="camps", min_value=0, max_value=validation.MAX_CAMPS
            ),
            # Most expeditions carry a summit/high-point date (93% in the bundle): far fewer
            # means the date column was lost or misparsed, or a small slice of odd records.
            e.ExpectColumnValuesToNotBeNull(column="smtdate", mostly=0.8, severity=WARNING),
        ],
        "expedition_details": [
            e.ExpectColumnValuesToBeBetween(column="year", **years),
            e.ExpectColumnValuesToBeInSet(column="season", value_set=seasons),
            *[
                e.ExpectColumnValuesToBeBetween(column=name, min_value=0, max_value=members)
                for name in ("members", "hired_staff")
            ],
            # Most expeditions say when they reached base camp (89% in the bundle).
            e.ExpectColumnValuesToNotBeNull(column="basecamp_date", mostly=0.7, severity=WARNING),
        ],
        "members": [
            e.ExpectColumnValuesToBeBetween(column="year", **years),
            e.ExpectColumnValuesToBeInSet(column="season", value_set=seasons),
            e.ExpectColumnValuesToBeBetween(column="age", min_value=1, max_value=100),
            e.ExpectColumnValuesToBeInSet(column="sex", value_set=list(validation.SEXES)),
            e.ExpectColumnValuesToBeBetween(
                column="highpoint_metres", min_value=0, max_value=height
            ),
            # The member summit rate is 38% in the bundle; a rate outside 10-70% means the
            # label column was misread, not that climbing changed (or a slice of one team).
            e.ExpectColumnMeanToBeBetween(
                column="success", min_value=0.1, max_value=0.7, severity=WARNING
            ),
        ],
    }
    return common + per_table[table]
