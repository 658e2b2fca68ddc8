"""The features stage on the whole bundle: split table, folder, time split, train-only fitting."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pytest
from features_tables import settings_for

from deepsummit.contracts.snapshot import PREPROCESSING_FILE, load_features, newest_features_dir
from deepsummit.core.context import RunContext
from deepsummit.core.errors import PipelineError
from deepsummit.core.inputs import OUTCOME_COLUMNS, RARE_FOLDS
from deepsummit.core.sections import SplitYears
from deepsummit.core.warehouse import frame_digest
from deepsummit.features.stage import FeaturesReport, build_features
from deepsummit.features.tabular import TABULAR_FEATURES
from deepsummit.features.validation import validate_features

pytest_plugins = ["features_fixtures"]


@pytest.fixture(scope="module")
def built(bundle_features):
    return bundle_features


def test_bundle_build_reports_the_split_table(built) -> None:
    _, report, _ = built
    assert isinstance(report, FeaturesReport)
    text = report.render()
    print(text)
    for word in ("train", "validation", "test", "window incomplete", report.digest[:12]):
        assert word in text
    # Every dated record with an outcome is an attempt (tests/features/test_attempts.py counts
    # them): 73,295 member rows and 10,074 climbing members of expeditions without member rows.
    assert report.rows == sum(s.attempts for s in report.splits.values()) == 73_295 + 10_074
    assert (report.member_rows, report.expedition_members) == (76_519, 10_838)
    assert report.member_rows + report.expedition_members == report.rows + sum(
        report.excluded.values()
    )
    assert "76,519 member rows + 10,838 members counted by expedition records" in text
    # The split counts back from the newest year with a dated record: 2025.
    assert {name: s.years for name, s in report.splits.items()} == {
        "train": "<= 2020", "validation": "2021-2022", "test": "2023-2025",
    }  # fmt: skip
    assert all(s.attempts > 1000 for s in report.splits.values())
    assert all(0.05 < s.label_rate < 0.95 for s in report.splits.values())


def test_split_by_year_keeps_expeditions_whole_and_no_outcome_column(built) -> None:
    _, report, features = built
    _, preprocessor = load_features(report.directory)
    split = SplitYears(**preprocessor.extra["split"])
    assert split == SplitYears(2020, 2022, 2025)
    years = features.group_by("split").agg(
        pl.col("year").min().alias("first"), pl.col("year").max().alias("last")
    )
    bounds = {row[0]: (row[1], row[2]) for row in years.iter_rows()}
    assert bounds["train"][1] <= split.train_until < bounds["validation"][0]
    assert bounds["validation"][1] <= split.validation_until < bounds["test"][0]
    assert bounds["test"][1] <= split.test_until
    sides = features.group_by("expid", "year").agg(pl.col("split").n_unique())
    assert sides["split"].max() == 1
    # The features table keeps the retrospective reference (member oxygen use, recorded after
    # the climb) for analysis; the model's arrays never read it (tests/features/test_spec.py).
    assert OUTCOME_COLUMNS & set(features.columns) == {"oxygen_used"}
    folds = list(RARE_FOLDS.values())  # after the inputs: the shared tokens rare values fold into
    tabular = features.columns[-len(TABULAR_FEATURES) - len(folds) :]
    assert tabular == [*TABULAR_FEATURES, *folds]
    # overall summit rate near the README's 0.4076 for members with smtdate on the 8 peaks
    assert 0.38 < features["label"].mean() < 0.44


def test_folder_holds_the_snapshot_arrays_and_preprocessing(built) -> None:
    _, report, features = built
    assert report.directory.name == report.snapshot_digest[:12]
    snapshot = pl.read_parquet(report.directory / "features.parquet")
    assert frame_digest(snapshot) == report.digest == frame_digest(features)
    arrays, preprocessor = load_features(report.directory)
    assert preprocessor.extra["digest"] == report.digest
    assert preprocessor.weather_source == "archive"
    for name, figures in report.splits.items():
        assert len(arrays[name]) == figures.attempts
        assert arrays[name].weather.shape == (figures.attempts, 26, 16)
        assert float(arrays[name].label.mean()) == pytest.approx(figures.label_rate)
    train = arrays["train"]
    # z-scored with train statistics: train columns have mean ~0 where present
    present = ~train.numeric_missing[:, 0]
    assert abs(train.numeric[present, 0].mean()) < 1e-3
    assert not np.isnan(train.weather).any()


def test_statistics_and_vocabularies_ignore_the_test_split(
    built, bundle_copy: Path, tmp_path: Path
) -> None:
    _, report, _ = built
    with duckdb.connect(str(bundle_copy)) as con:
        # The validation and test years (2021-2025): new routes, and the outcomes turned over.
        con.execute(
            "UPDATE expeditions SET route1 = 'Atlantis', smtmembers = totmembers - smtmembers "
            "WHERE year > 2020"
        )
    changed = build_features(settings_for(tmp_path, bundle_copy), RunContext(tmp_path / "run"))
    assert changed.digest != report.digest  # the test rows did change
    _, original = load_features(report.directory)
    _, refitted = load_features(changed.directory)
    assert refitted.vocabularies == original.vocabularies
    assert refitted.numeric == original.numeric
    assert refitted.weather == original.weather


def test_validation_stops_a_bad_features_table(built, tmp_path: Path) -> None:
    _, _, features = built
    with pytest.raises(PipelineError, match=r"schema.*heightm"):
        validate_features(features.with_columns(heightm=pl.lit(9999.0)), tmp_path)
    summits = features.with_columns(label=pl.col("label") | (pl.col("split") == "test"))
    with pytest.raises(PipelineError, match="expect_column_mean_to_be_between"):
        validate_features(summits, tmp_path)


def test_the_newest_finished_snapshot_is_found(tmp_path: Path) -> None:
    with pytest.raises(PipelineError, match="no features snapshot"):
        newest_features_dir(tmp_path)
    for age_s, name in ((300, "older"), (100, "newer"), (0, "half-written.partial"), (0, "empty")):
        folder = tmp_path / name
        folder.mkdir()
        if name != "empty":
            marker = folder / PREPROCESSING_FILE
            marker.write_text("{}")
            stamp = marker.stat().st_mtime - age_s
            os.utime(folder, (stamp, stamp))
    assert newest_features_dir(tmp_path) == tmp_path / "newer"
