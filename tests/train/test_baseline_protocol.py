"""Each baseline goes through the protocol on the bundle: its rounds counted on rows of the kind
the held-out check scores, its map fitted on the member check, refit with several seeds."""

from __future__ import annotations

import polars as pl
import pytest

from deepsummit.contracts.preprocessing import Preprocessor
from deepsummit.contracts.snapshot import PREPROCESSING_FILE, read_features, read_windows
from deepsummit.core.baseline_sections import BaselinesConfig
from deepsummit.core.config import load_settings
from deepsummit.train.baseline_protocol import (
    baseline_seeds,
    run_baselines,
    scored_kind,
    stopping_rows,
)
from deepsummit.train.baselines import CATBOOST, LIGHTGBM, LOGISTIC
from deepsummit.train.recipe import Recipe, check_inputs, preprocessing_for, training_arrays

pytest_plugins = ["features_fixtures"]

# The tiny profile's baselines and slice (2,000 rows), with two seeds to average.
SETTINGS = load_settings("tiny", {"train": {"num_threads": 1}, "baselines": {"seeds": 2}})


@pytest.fixture(scope="module")
def snapshot(bundle_features):
    directory = bundle_features[1].directory
    template = Preprocessor.load(directory / PREPROCESSING_FILE)
    return read_features(directory), read_windows(directory), template


def held_out_check(snapshot, years: tuple[int, ...]):
    """(rows before `years`, their rows, the member check, the counting rows) as a check that
    holds `years` out reads them."""
    features, windows, template = snapshot
    before = features.filter(pl.col("year") < years[0])
    held_out = features.filter(pl.col("year").is_in(years))
    check = check_inputs(Recipe.of(SETTINGS), features, windows, template, years[0] - 1)
    stopping = stopping_rows(before, windows, template, held_out, check, SETTINGS.train)
    return before, held_out, check, stopping


def test_expedition_seasons_count_rounds_on_the_newest_expedition_records_before(snapshot):
    before, held_out, check, stopping = held_out_check(snapshot, (2023, 2024, 2025))
    assert scored_kind(held_out) == "expedition"
    # The bundle's expedition records start in Autumn 2019; 2021-2022 are the newest two.
    assert (stopping.kind, stopping.years) == ("expedition", (2021, 2022))
    assert (
        len(stopping.validation)
        == before.filter(
            pl.col("year").is_in([2021, 2022]) & (pl.col("record") == "expedition")
        ).height
    )
    assert len(stopping.train) == before.filter(pl.col("year") < 2021).height
    # The map is still fitted on members' own records: the member check of 2018-2019.
    assert check.years == (2018, 2019)


def test_member_seasons_count_rounds_on_the_member_check(snapshot):
    _, held_out, check, stopping = held_out_check(snapshot, (2017,))
    assert scored_kind(held_out) == "member"
    assert (stopping.kind, stopping.years) == ("member", check.years) == ("member", (2015, 2016))
    assert stopping.validation is check.member_arrays


def test_every_baseline_is_counted_mapped_and_refit(snapshot):
    _, windows, template = snapshot
    before, held_out, check, stopping = held_out_check(snapshot, (2023, 2024, 2025))
    preprocessor = preprocessing_for(template, before, windows)
    models = run_baselines(
        training_arrays(preprocessor, before, windows, SETTINGS.train),
        preprocessor.transform(held_out, windows),
        preprocessor.categorical_cardinalities,
        stopping,
        check,
        SETTINGS.baselines,
        SETTINGS.train,
        baseline_seeds(SETTINGS.baselines, SETTINGS.model, SETTINGS.train),
    )
    assert [m.name for m in models] == [LOGISTIC, LIGHTGBM, CATBOOST]
    for model in models:
        assert model.test.shape == (held_out.height,)
        assert model.calibrator is not None and model.calibrator.method == "temperature"
    rounds = {m.name: m.rounds for m in models}
    assert rounds[LOGISTIC] == 0
    assert all(1 <= rounds[name] <= SETTINGS.baselines.max_rounds for name in (LIGHTGBM, CATBOOST))


def test_the_trees_average_as_many_seeds_as_the_transformer_has_members() -> None:
    served = load_settings("cpu")  # one training of a network of 4 ensemble members
    assert baseline_seeds(BaselinesConfig(), served.model, served.train) == 4
    assert baseline_seeds(BaselinesConfig(seeds=2), served.model, served.train) == 2
