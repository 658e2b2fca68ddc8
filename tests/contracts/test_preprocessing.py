"""Preprocessor: statistics and vocabularies from the rows it is fitted on, masks for missing."""

from __future__ import annotations

import datetime as dt
import json

import numpy as np
import polars as pl
import pytest

from deepsummit.contracts.preprocessing import Preprocessor
from deepsummit.core.inputs import (
    SPEC_INPUT_SET,
    SPEC_INPUTS,
    WEATHER_CHANNELS,
    WEATHER_TOKENS,
    InputSet,
)
from deepsummit.features.windows import window_days

DATES = [dt.date(2010, 5, 1), dt.date(2010, 5, 2)]
NUMERIC_FEATURES = SPEC_INPUT_SET.numeric
CATEGORICAL_FEATURES = SPEC_INPUT_SET.categorical
BINARY_FEATURES = SPEC_INPUT_SET.binary


def features(rows: list[dict]) -> pl.DataFrame:
    base = {name: 1.0 for name in NUMERIC_FEATURES} | {name: "x" for name in CATEGORICAL_FEATURES}
    base |= {name: 1 for name in BINARY_FEATURES} | {"smtdate": DATES[0], "label": True}
    base |= {"height_band": "6500–6999 m"}
    return pl.DataFrame([base | row for row in rows]).with_columns(
        pl.col(BINARY_FEATURES).cast(pl.Int32), pl.col(NUMERIC_FEATURES).cast(pl.Float64)
    )


def windows(values: dict[dt.date, float]) -> pl.DataFrame:
    """A window per date whose every variable is `value` on every token (precipitation_hours
    NULL everywhere, as in the archive)."""
    tokens = (
        window_days()
        .group_by("token")
        .agg(pl.col("days_before").mean(), pl.col("middle_days_before").first())
    )
    frames = []
    for date, value in values.items():
        frames.append(
            tokens.with_columns(
                peakid=pl.lit("PEAK"),
                date=pl.lit(date),
                day_of_year=pl.lit(date.timetuple().tm_yday) - pl.col("middle_days_before"),
                **{name: pl.lit(value) for name in WEATHER_CHANNELS},
            ).with_columns(precipitation_hours=pl.lit(None, pl.Float64))
        )
    return pl.concat(frames)


TRAIN = features(
    [
        {"age": 20.0, "nationality": "Nepal", "peakid": "PEAK"},
        {"age": 30.0, "nationality": "Nepal", "peakid": "PEAK"},
        {"age": None, "nationality": "France", "peakid": "PEAK", "sex": None},
        {"age": 40.0, "nationality": "Nepal", "peakid": "PEAK", "smtdate": DATES[1]},
    ]
)
WINDOWS = windows({DATES[0]: 1.0, DATES[1]: 5.0})


def fit(train: pl.DataFrame = TRAIN, min_count: int = 2) -> Preprocessor:
    return Preprocessor.fit(train, WINDOWS, SPEC_INPUT_SET, "archive", min_count, {"digest": "d"})


def test_vocabularies_keep_frequent_train_values_and_fold_the_rest_into_unknown() -> None:
    pre = fit()
    assert pre.vocabularies["nationality"] == ["Nepal"]  # France seen once < 2
    rows = features([{"nationality": "Nepal"}, {"nationality": "France"}, {"nationality": None}])
    arrays = pre.transform(rows.with_columns(peakid=pl.lit("PEAK")), WINDOWS)
    assert arrays.categorical[:, CATEGORICAL_FEATURES.index("nationality")].tolist() == [1, 0, 0]
    notes = pre.unknown_notes_by_row(rows.with_columns(peakid=pl.lit("PEAK")))
    assert notes == [[], ["nationality 'France' is not in the training vocabulary: unknown"], []]


def test_numeric_statistics_come_from_the_fitted_rows_and_missing_stays_masked() -> None:
    pre = fit()
    assert pre.numeric.mean["age"] == pytest.approx(30.0)
    assert pre.numeric.std["age"] == pytest.approx(np.std([20.0, 30.0, 40.0]))
    assert pre.numeric.std["heightm"] == 1.0  # constant column: no division by zero
    arrays = pre.transform(TRAIN, WINDOWS)
    age = NUMERIC_FEATURES.index("age")
    assert arrays.numeric_missing[:, age].tolist() == [False, False, True, False]
    assert arrays.numeric[2, age] == 0.0
    np.testing.assert_allclose(arrays.numeric[[0, 1, 3], age], [-1.2247449, 0.0, 1.2247449])
    sex = BINARY_FEATURES.index("sex")
    assert arrays.binary_missing[:, sex].tolist() == [False, False, True, False]
    assert arrays.binary[:, sex].tolist() == [1, 1, 0, 1]
    # other rows than the train rows change nothing
    assert fit(TRAIN).to_json() == fit(pl.concat([TRAIN])).to_json()
    assert fit(TRAIN).to_json() != fit(TRAIN.with_columns(age=pl.lit(99.0))).to_json()


def test_weather_statistics_weigh_each_window_by_its_train_attempts() -> None:
    pre = fit()
    # 3 train rows use the window of value 1, one the window of value 5: mean 2, std sqrt(3)
    assert pre.weather.mean["temperature_2m_mean"] == pytest.approx(2.0)
    assert pre.weather.std["temperature_2m_mean"] == pytest.approx(np.sqrt(3.0))
    assert pre.weather.mean["precipitation_hours"] is None
    arrays = pre.transform(TRAIN, WINDOWS)
    hours = WEATHER_CHANNELS.index("precipitation_hours")
    assert arrays.weather_missing[:, :, hours].all()
    assert arrays.weather_missing.sum() == arrays.weather_missing[:, :, hours].sum()
    np.testing.assert_allclose(arrays.weather[3, :, 0], (5.0 - 2.0) / np.sqrt(3.0), rtol=1e-6)


def test_every_array_has_the_contract_shape_and_dtype() -> None:
    arrays = fit().transform(TRAIN, WINDOWS)
    n = TRAIN.height
    expected = {
        "numeric": ((n, 8), np.float32),
        "numeric_missing": ((n, 8), np.bool_),
        "categorical": ((n, 6), np.int64),
        "binary": ((n, 6), np.int64),
        "binary_missing": ((n, 6), np.bool_),
        "weather": ((n, 26, 16), np.float32),
        "weather_missing": ((n, 26, 16), np.bool_),
        "days_before": ((n, 26), np.float32),
        "day_of_year": ((n, 26), np.float32),
        "label": ((n,), np.float32),
    }
    for name, (shape, dtype) in expected.items():
        array = getattr(arrays, name)
        assert (array.shape, array.dtype) == (shape, dtype), name
    assert arrays.days_before[0, [6, 16, 25]].tolist() == [0.0, 1.0, 4.5]
    assert arrays.day_of_year[0, 6] == DATES[0].timetuple().tm_yday
    assert WEATHER_TOKENS == 26


def test_json_round_trip_and_a_planned_row_without_label() -> None:
    pre = fit()
    again = Preprocessor.from_json(pre.to_json())
    assert again == pre
    planned = TRAIN.head(1).drop("label")
    arrays = again.transform(planned, WINDOWS)
    assert np.isnan(arrays.label).all()
    document = json.loads(pre.to_json())
    document["weather_channels"][0] = "temperature_2m_median"
    with pytest.raises(ValueError, match="weather channels"):
        Preprocessor.from_json(json.dumps(document))


def test_a_model_reads_exactly_its_input_set() -> None:
    """The extension inputs widen the arrays; a model of the spec's tokens never sees them."""
    extended = SPEC_INPUT_SET.of((*SPEC_INPUT_SET.names, "agency", "staff_per_member"))
    train = TRAIN.with_columns(agency=pl.lit("Asian Trekking"), staff_per_member=pl.lit(1.5))
    pre = Preprocessor.fit(train, WINDOWS, extended, "archive", 1)
    arrays = pre.transform(train, WINDOWS)
    assert (arrays.numeric.shape[1], arrays.categorical.shape[1]) == (9, 7)
    assert pre.model_dimensions()["categorical_cardinalities"][-1] == 2  # unknown + the agency
    assert fit().transform(train, WINDOWS).numeric.shape[1] == 8


def test_a_rare_peak_reads_as_its_height_band_s_shared_token_with_a_note() -> None:
    """A peak with fewer train attempts than `rare_fold_count` has no token of its own: it
    shares its height band's, learnt from every rare peak of that band; a frequent peak keeps
    its own; a peak of a band no rare train peak had is unknown."""
    band = {"height_band": "6000–6499 m"}
    train = features(
        [{"peakid": "BIG"}] * 3
        + [{"peakid": "TINY", **band}, {"peakid": "WEE", **band}]
        + [{"peakid": "ODD", "height_band": "7000–7499 m"}]
    )
    peaks = ("BIG", "TINY", "WEE", "ODD", "NEWCOMER")
    windows = pl.concat([WINDOWS.with_columns(peakid=pl.lit(peak)) for peak in peaks])
    pre = Preprocessor.fit(train, windows, SPEC_INPUT_SET, "archive", 2, {}, rare_fold_count=3)
    shared = "rare peakid: 6000–6499 m"
    assert pre.vocabularies["peakid"] == ["BIG", shared]  # 7000–7499 m: one rare row < 2
    asked = features(
        [
            {"peakid": "BIG"},
            {"peakid": "TINY", **band},
            {"peakid": "NEWCOMER", **band},  # never in the train rows: its band's token too
            {"peakid": "ODD", "height_band": "7000–7499 m"},
        ]
    )
    column = SPEC_INPUT_SET.categorical.index("peakid")
    assert pre.transform(asked, windows).categorical[:, column].tolist() == [1, 2, 2, 0]
    notes = pre.unknown_notes_by_row(asked)
    assert notes[0] == []
    assert "seen too rarely" in notes[1][0] and shared in notes[1][0]
    assert "not in the training vocabulary" in notes[3][0]
    assert Preprocessor.from_json(pre.to_json()) == pre


def test_a_push_day_outside_the_learnt_seasons_is_answered_with_a_note() -> None:
    """The calendar inputs' training range is kept; a planned day outside it still gets its
    arrays (it is answered), and a note that names the input and the range."""
    inputs = InputSet.of([*SPEC_INPUTS, "day_of_year", "days_in_season"])
    train = TRAIN.with_columns(
        day_of_year=pl.Series([121.0, 122.0, 130.0, 140.0]),
        days_in_season=pl.Series([61.0, 62.0, 70.0, 80.0]),
    )
    preprocessor = Preprocessor.fit(train, WINDOWS, inputs, "archive", 2, {"digest": "d"})
    assert preprocessor.calendar_ranges == {
        "day_of_year": (121.0, 140.0),
        "days_in_season": (61.0, 80.0),
    }
    planned = train.head(2).with_columns(
        day_of_year=pl.Series([130.0, 200.0]), days_in_season=pl.Series([70.0, 110.0])
    )
    notes = preprocessor.calendar_notes_by_row(planned)
    assert notes[0] == []
    assert notes[1] == [
        "day_of_year 200 lies outside the 121–140 of the training attempts: the push day is "
        "outside the seasons the model learnt",
        "days_in_season 110 lies outside the 61–80 of the training attempts: the push day is "
        "outside the seasons the model learnt",
    ]
    arrays = preprocessor.transform(planned, WINDOWS)
    assert len(arrays) == 2 and not np.isnan(arrays.numeric).any()
