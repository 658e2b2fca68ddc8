"""The generic GX runner: results as JSON and Data Docs HTML in the run folder."""

from __future__ import annotations

import json
from pathlib import Path

import great_expectations as gx
import polars as pl

from deepsummit.records.expectations import (
    clean_table_expectations,
    validate_frame,
    validate_frames,
)


def test_failing_and_passing_expectations_are_reported(tmp_path: Path) -> None:
    frame = pl.DataFrame({"age": [20, 35, 250], "sex": ["M", "F", "F"]})
    expectations = [
        gx.expectations.ExpectColumnValuesToBeBetween(column="age", min_value=1, max_value=100),
        gx.expectations.ExpectColumnValuesToBeInSet(column="sex", value_set=["M", "F"]),
    ]
    result = validate_frame(frame, "people", expectations, tmp_path)
    assert not result.success
    assert (result.evaluated, result.successful) == (2, 1)
    assert result.failed == ("expect_column_values_to_be_between(age)",)
    stored = json.loads(result.results_path.read_text())
    assert result.results_path == tmp_path / "expectations" / "people.json"
    assert stored["results"][0]["result"]["unexpected_count"] == 1
    assert result.docs_index == tmp_path / "data_docs" / "index.html"
    assert "people" in result.docs_index.read_text()
    assert "1/2 expectations FAILED" in result.render()


def test_one_docs_site_lists_every_suite_and_lists_are_reusable(tmp_path: Path) -> None:
    expectations = clean_table_expectations("peaks")
    good = pl.DataFrame(
        {
            "peakid": ["EVER", "AMAD"],
            "heightm": [8849, 6814],
            "latitude": [27.9881, 27.85],
            "longitude": [86.925, 86.82],
            "coord_source": ["published", "geocoded"],
        }
    )
    results = validate_frames(
        {"peaks_a": (good, expectations), "peaks_b": (good, expectations)}, tmp_path
    )
    assert all(result.success for result in results.values())
    index = (tmp_path / "data_docs" / "index.html").read_text()
    assert "peaks_a" in index and "peaks_b" in index


def test_only_critical_expectations_block(tmp_path: Path) -> None:
    frame = pl.DataFrame({"age": [20, 35, 250], "success": [True, True, True]})
    expectations = [
        gx.expectations.ExpectColumnMeanToBeBetween(
            column="success", min_value=0.1, max_value=0.7, severity="warning"
        ),
        gx.expectations.ExpectColumnValuesToBeBetween(column="age", min_value=1, max_value=300),
    ]
    warned = validate_frame(frame, "warned", expectations, tmp_path)
    assert not warned.success and warned.blocking == ()
    assert warned.failed == ("expect_column_mean_to_be_between(success)",)
    assert "passed with warnings: expect_column_mean_to_be_between(success)" in warned.render()

    stricter = [*expectations[:1], expectations[1].copy(update={"max_value": 100})]
    blocked = validate_frame(frame, "blocked", stricter, tmp_path)
    assert blocked.blocking == ("expect_column_values_to_be_between(age)",)
    assert "FAILED" in blocked.render()


def test_the_clean_table_suites_block_on_keys_required_columns_and_value_sets() -> None:
    configs = [e.configuration.to_json_dict() for e in clean_table_expectations("members")]

    def named(severity: str) -> set[tuple[str, str]]:
        return {
            (c["type"], str(c["kwargs"].get("column") or c["kwargs"].get("column_list")))
            for c in configs
            if c["severity"] == severity
        }

    assert {
        ("expect_compound_columns_to_be_unique", "['member_id', 'year']"),
        ("expect_column_values_to_not_be_null", "success"),
        ("expect_column_values_to_not_be_null", "source"),
        ("expect_column_values_to_be_in_set", "season"),
    } <= named("critical")
    assert named("warning") == {("expect_column_mean_to_be_between", "success")}
