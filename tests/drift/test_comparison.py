"""Input drift on the bundle's member records and ERA5 weather: samples of one distribution stay
quiet, shifted ones are flagged by name, PSI is the documented formula, too few rows never drift."""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest

from deepsummit.contracts.distribution import MISSING, OTHER, DistributionProfile
from deepsummit.core.config import load_settings
from deepsummit.drift.comparison import (
    MAJOR_PSI,
    MAX_NOISE_FRACTION,
    MODERATE_PSI,
    NOT_ENOUGH_ROWS,
    SHARE_FLOOR,
    DriftReport,
    FeatureDrift,
    compare,
    compare_shift,
)
from deepsummit.drift.profiling import profile

DATA_DIR = load_settings().paths.data_dir  # the data bundle the settings point at
NUMERIC = ("age",)
CATEGORICAL = ("nationality", "sex", "season", "oxygen_used", "hired")
WEATHER = ("temperature_2m_mean", "wind_speed_10m_max", "precipitation_sum", "snowfall_sum")


def halves(frame: pl.DataFrame, seed: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Two random halves of `frame`: samples of one distribution."""
    shuffled = frame.sample(fraction=1.0, shuffle=True, seed=seed)
    return shuffled[: frame.height // 2], shuffled[frame.height // 2 :]


@pytest.fixture(scope="module")
def members() -> tuple[pl.DataFrame, pl.DataFrame]:
    frame = pl.read_csv(
        DATA_DIR / "himalayan/members.csv.gz",
        null_values="NA",
        infer_schema_length=None,
        columns=["age", "citizenship", "sex", "season", "oxygen_used", "hired"],
    ).rename({"citizenship": "nationality"})
    return halves(frame, seed=7)


@pytest.fixture(scope="module")
def weather() -> tuple[pl.DataFrame, pl.DataFrame]:
    """Everest's ERA5 days, one row per day: the long weather frame at its simplest grain."""
    frame = pl.read_parquet(DATA_DIR / "weather/era5_daily.parquet", columns=["peakid", *WEATHER])
    return halves(frame.filter(pl.col("peakid") == "EVER"), seed=11)


@pytest.fixture(scope="module")
def reference(members: tuple[pl.DataFrame, pl.DataFrame]) -> DistributionProfile:
    return profile(members[0], NUMERIC, CATEGORICAL, description="first half of the members")


def with_share_replaced(
    frame: pl.DataFrame, column: str, value: str | None, share: float, seed: int
) -> pl.DataFrame:
    """`frame` with a random `share` of its `column` values replaced by `value`."""
    chosen = pl.Series(np.random.default_rng(seed).random(frame.height) < share)
    return frame.with_columns(
        pl.when(chosen).then(pl.lit(value, pl.String)).otherwise(pl.col(column)).alias(column)
    )


def row(report: DriftReport, feature: str) -> FeatureDrift:
    return next(r for r in report.rows if r.feature == feature)


def test_a_sample_against_itself_or_another_half_is_not_flagged(members, reference) -> None:
    first, second = members
    itself = compare(reference, first, MODERATE_PSI)
    assert [r.psi for r in itself.rows] == [0.0] * len(NUMERIC + CATEGORICAL)

    other_half = compare(reference, second, MODERATE_PSI)  # the strict, "moderate" threshold
    assert other_half.drifted == ()
    assert other_half.warning() is None
    assert {r.status for r in other_half.rows} == {"stable"}
    for r in other_half.rows:
        # The halves differ by sampling alone, so each PSI is of the order of its noise.
        assert r.psi is not None and r.expected_noise is not None
        assert r.psi < 5 * r.expected_noise, r


def test_ages_fifteen_years_older_are_flagged(members, reference) -> None:
    older = members[1].with_columns(pl.col("age") + 15)
    report = compare(reference, older, MAJOR_PSI, description="second half, 15 years older")

    assert report.drifted == ("age",)
    assert row(report, "age").psi > MAJOR_PSI
    assert "age" in report.warning() and "second half, 15 years older" in report.warning()
    lines = report.markdown().splitlines()
    table_rows = lines[next(i for i, line in enumerate(lines) if line.startswith("| ---")) + 1 :]
    assert len(table_rows) == len(NUMERIC + CATEGORICAL)
    assert table_rows[0].startswith("| **drifted** | age | numeric |")
    assert sum("**drifted**" in line for line in table_rows) == 1
    metrics = report.metrics()
    assert set(metrics) == {f"drift_psi_{name}" for name in NUMERIC + CATEGORICAL}
    assert metrics["drift_psi_age"] == row(report, "age").psi


def test_a_changed_nationality_mix_is_flagged_with_the_value_that_moved(members, reference) -> None:
    more_nepalese = with_share_replaced(members[1], "nationality", "Nepal", 0.5, seed=3)
    report = compare(reference, more_nepalese, MAJOR_PSI)

    assert report.drifted == ("nationality",)
    nationality = row(report, "nationality")
    assert nationality.psi > MAJOR_PSI
    assert nationality.shifted_value == "Nepal"
    assert nationality.share_change > 0.3
    assert "Nepal +" in report.markdown()


def test_a_weather_variable_two_deviations_higher_is_flagged(members, weather) -> None:
    # One profile of the attempts' columns and the weather rows, as the model artifact holds.
    tabular, days = members[0], weather[0]
    combined_profile = profile(tabular, NUMERIC, CATEGORICAL).merged(profile(days, WEATHER, []))
    windier = weather[1].with_columns(
        pl.col("wind_speed_10m_max") + 2 * days["wind_speed_10m_max"].std()
    )
    report = compare(combined_profile, members[1], features=NUMERIC + CATEGORICAL).combined(
        compare(combined_profile, windier, features=WEATHER)
    )

    assert [r.feature for r in report.rows] == [*NUMERIC, *CATEGORICAL, *WEATHER]
    assert report.drifted == ("wind_speed_10m_max",)
    assert row(report, "wind_speed_10m_max").psi > MAJOR_PSI
    assert row(report, "wind_speed_10m_max").current_rows == windier.height


def test_psi_matches_a_hand_computation() -> None:
    # Reference 1, 2, 3, 4 (250 rows each): two bins cut at the median 2.5, shares 0.5 | 0.5,
    # and an empty missing bin.
    reference = profile(pl.DataFrame({"x": [1.0, 2.0, 3.0, 4.0] * 250}), ["x"], [], bins=2)
    assert reference.numeric["x"].edges == (2.5,)
    assert reference.numeric["x"].shares == (0.5, 0.5, 0.0)
    # Current: 600 below the cut, 300 above it (one far beyond the reference range, still
    # counted in the open outer bin), 100 missing.
    current = pl.DataFrame({"x": [1.0] * 600 + [3.0] * 299 + [1e6] + [None] * 100})

    # By hand, the reference's empty missing bin raised to the floor 1e-4:
    #   (0.6 − 0.5)·ln(0.6/0.5) + (0.3 − 0.5)·ln(0.3/0.5) + (0.1 − 0.0001)·ln(0.1/0.0001)
    #   = 0.1 × 0.1823216 + 0.2 × 0.5108256 + 0.0999 × 6.9077553 = 0.8104820
    assert SHARE_FLOOR == 1e-4
    hand_computed = 0.8104820
    at_one = compare(reference, current, threshold=1.0).rows[0]
    assert at_one.psi == pytest.approx(hand_computed, abs=1e-7)
    assert not at_one.drifted
    assert compare(reference, current, threshold=0.5).rows[0].drifted
    assert at_one.current_missing == pytest.approx(0.1)


def test_unseen_categories_count_as_other_and_missing_as_its_own_value() -> None:
    reference = profile(pl.DataFrame({"c": ["a"] * 500 + ["b"] * 300 + ["c"] * 200}), [], ["c"])
    assert reference.categorical["c"].values == ("a", "b", "c", OTHER, MISSING)
    current = pl.DataFrame({"c": ["a"] * 400 + ["b"] * 300 + ["z"] * 250 + [None] * 50})

    report = compare(reference, current, threshold=1.0)
    c = row(report, "c")
    assert c.shifted_value == OTHER
    assert c.share_change == pytest.approx(0.25)
    assert c.current_missing == pytest.approx(0.05)
    shares = [(0.5, 0.4), (0.3, 0.3), (0.2, 0.0), (0.0, 0.25), (0.0, 0.05)]
    floored = [(max(r, SHARE_FLOOR), max(c, SHARE_FLOOR)) for r, c in shares]
    assert c.psi == pytest.approx(sum((c - r) * math.log(c / r) for r, c in floored))

    fewer_a = pl.DataFrame({"c": ["a"] * 200 + ["b"] * 400 + ["c"] * 250 + ["z"] * 150})
    c = row(compare(reference, fewer_a, threshold=1.0), "c")
    assert (c.shifted_value, c.share_change) == ("a", pytest.approx(-0.3))


def test_unseen_nationalities_are_flagged_through_the_other_bucket(members, reference) -> None:
    kept = reference.categorical["nationality"]
    # Rare nationalities already share the other bucket in the reference.
    assert kept.shares[kept.values.index(OTHER)] > 0
    assert min(kept.shares[: kept.values.index(OTHER)]) >= 0.01
    unseen = with_share_replaced(members[1], "nationality", "Atlantis", 0.3, seed=5)
    nationality = row(compare(reference, unseen), "nationality")
    assert nationality.drifted
    assert nationality.shifted_value == OTHER
    assert nationality.share_change > 0.25


@pytest.mark.parametrize("feature", ["age", "sex"])
def test_a_column_that_becomes_all_missing_is_flagged(members, reference, feature) -> None:
    emptied = members[1].with_columns(pl.lit(None, members[1][feature].dtype).alias(feature))
    report = compare(reference, emptied)
    assert report.drifted == (feature,)
    assert row(report, feature).current_missing == 1.0
    assert row(report, feature).reference_missing < 0.1


def test_nan_and_null_both_count_as_missing(members, reference) -> None:
    second = members[1]
    as_nan = second.with_columns(pl.col("age").cast(pl.Float64).fill_null(float("nan")))
    assert as_nan["age"].null_count() == 0 and as_nan["age"].is_nan().sum() > 0
    assert row(compare(reference, as_nan), "age") == row(compare(reference, second), "age")


def test_json_round_trips_exactly(members, weather, reference) -> None:
    merged = reference.merged(profile(weather[0], WEATHER, [], description="Everest days"))
    text = merged.to_json()

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} is not JSON")

    json.loads(text, parse_constant=refuse)  # strict JSON: no NaN or Infinity
    restored = DistributionProfile.from_json(text)
    assert restored == merged
    assert restored.description == "first half of the members; Everest days"
    assert len(text) < 20_000  # bins and shares, not rows: fit for a model artifact

    report = compare(restored, members[1], features=NUMERIC + CATEGORICAL)
    assert report == compare(merged, members[1], features=NUMERIC + CATEGORICAL)
    assert json.loads(report.to_json(), parse_constant=refuse) == report.as_dict()


def test_too_few_rows_never_drift(members, reference) -> None:
    few_and_older = members[1].head(20).with_columns(pl.col("age") + 15)
    report = compare(reference, few_and_older)
    assert {r.status for r in report.rows} == {NOT_ENOUGH_ROWS}
    assert report.drifted == ()
    assert report.warning() is None
    assert report.metrics() == {}
    assert "| age | numeric | – | not enough rows |" in report.markdown()


def test_the_minimum_is_configurable_and_noisy_features_wait_for_more_rows(
    members, reference
) -> None:
    sample = members[1].head(200)
    default = compare(reference, sample)
    # Two-valued oxygen use is judged on 200 rows; nationality, with some 20 values, would
    # show a PSI near the threshold from sampling alone, so it is not.
    assert row(default, "oxygen_used").psi is not None
    assert row(default, "nationality").status == NOT_ENOUGH_ROWS
    for r in default.rows:
        judged = r.expected_noise <= MAX_NOISE_FRACTION * default.threshold
        assert (r.psi is not None) == judged, r

    stricter = compare(reference, sample, min_rows=201)
    assert {r.status for r in stricter.rows} == {NOT_ENOUGH_ROWS}


def test_inputs_that_do_not_fit_are_refused(members, reference) -> None:
    with pytest.raises(ValueError, match="no column"):
        compare(reference, members[1].drop("age"))
    with pytest.raises(ValueError, match="no \\['altitude'\\]"):
        compare(reference, members[1], features=["altitude"])
    with pytest.raises(ValueError, match="both numeric and categorical"):
        profile(members[0], ["age"], ["age"])


def test_a_stratum_s_profile_is_its_rows_on_the_whole_profile_s_bins() -> None:
    rng = np.random.default_rng(1)
    frame = pl.DataFrame(
        {
            "x": np.concatenate([rng.normal(0, 1, 600), rng.normal(5, 2, 400)]),
            "c": ["a"] * 500 + ["b"] * 300 + [None] * 200,
            "part": ["early"] * 600 + ["late"] * 400,
        }
    )
    whole = profile(frame, ["x"], ["c"], strata="part")
    late = frame.filter(pl.col("part") == "late")

    within = whole.within(["late", "never seen"], "the late rows")
    x = within.numeric["x"]
    assert within.description == "the late rows" and x.edges == whole.numeric["x"].edges
    assert x.rows == 400 and sum(x.shares) == pytest.approx(1.0)
    counts = np.bincount(np.searchsorted(x.edges, late["x"].to_numpy(), side="right"))
    assert x.shares[: len(counts)] == pytest.approx(counts / 400)
    assert (x.mean, x.sd) == (pytest.approx(late["x"].mean()), pytest.approx(late["x"].std()))
    assert within.categorical["c"].shares == pytest.approx((0.0, 0.5, 0.0, 0.5))  # a, b, …
    assert whole.within([], "none").numeric["x"].rows == 0
    # A stratum of two merged profiles (an attempt's columns and its weather rows) holds the
    # features of both; strata survive a JSON round trip.
    weather = profile(frame.with_columns(y=pl.col("x") * 2), ["y"], [], strata="part")
    merged = whole.merged(weather)
    assert set(merged.strata["late"].counts) == {"x", "c", "y"}
    assert merged.within(["late"], "").numeric["y"].mean == pytest.approx(2 * x.mean)
    assert DistributionProfile.from_json(merged.to_json()) == merged


def test_a_profile_without_means_or_strata_still_reads(members, reference) -> None:
    """As the releases before them wrote it (they read a newer one, ignoring what they lack)."""
    document = json.loads(reference.to_json())
    for column in document["numeric"].values():
        del column["mean"], column["sd"]
    del document["strata"]
    old = DistributionProfile.from_json(json.dumps(document))
    assert old.strata == {} and old.numeric["age"].mean is None
    assert compare(old, members[1]) == compare(reference, members[1])


def test_a_mean_several_deviations_away_is_flagged_by_its_shift(weather) -> None:
    days, others = weather
    reference = profile(days, WEATHER, [], description="Everest days")
    same = compare_shift(reference, others, features=WEATHER)
    assert same.drifted == () and same.warning() is None
    assert all(abs(r.shift_sd) < 0.1 for r in same.rows)

    sd = days["temperature_2m_mean"].std()
    warmer = others.with_columns(pl.col("temperature_2m_mean") + 4 * sd)
    report = compare_shift(reference, warmer, features=WEATHER, description="a warm window")
    assert report.drifted == ("temperature_2m_mean",)
    assert row(report, "temperature_2m_mean").shift_sd == pytest.approx(4.0, abs=0.1)
    assert row(report, "temperature_2m_mean").status == "major"
    assert "temperature_2m_mean +4.0 SD" in report.warning()
    assert "a mean beyond 3 SD; a warm window against Everest days" in report.warning()
    assert report.metrics()["drift_shift_sd_temperature_2m_mean"] == pytest.approx(4.0, abs=0.1)

    one_window = compare_shift(reference, warmer.head(26), features=WEATHER)
    assert one_window.drifted == ("temperature_2m_mean",)  # one window is enough to judge
    few = profile(days.head(10), WEATHER, [])
    assert {r.status for r in compare_shift(few, warmer, features=WEATHER).rows} == {
        NOT_ENOUGH_ROWS
    }
