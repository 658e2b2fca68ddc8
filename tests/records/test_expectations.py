"""The generic GX runner: results as JSON and Data Docs HTML in the run folder."""

from __future__ import annotations

import json
from pathlib import Path

import great_expectations as gx
import polars as pl

from pipeline.records.expectations import clean_table_expectations, validate_frame, validate_frames


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
