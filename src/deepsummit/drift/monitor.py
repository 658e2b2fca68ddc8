"""Input drift of the model's inputs: the training rows as the reference (frozen into the model
trained on them, deepsummit/contracts/artifact.py), and the newest attempts or a planned outlook
compared with the champion's reference (deepsummit/drift/comparison.py does the statistics).

Like with like: rows are compared with the training rows of the same season whose push days
fall within `drift.weeks_around` weeks of theirs, never with every season: a May window against
the whole year differs by the calendar alone. The reference keeps its rows' counts per season
and push week (a stratum, "Spring week 19"), so that the part matching any rows is summed at
comparison time.

Tabular inputs are compared one row per attempt: numbers as numbers, categories and binaries as
categories, by PSI. `season` is left out: the strata already hold it. The weather is compared
one row per attempt and window token, one column per channel, by its mean (the rows of one
season's windows are one year's weather, not independent draws: deepsummit/drift/comparison.py).
"""

from __future__ import annotations

import polars as pl

from deepsummit.contracts.distribution import DistributionProfile
from deepsummit.contracts.preprocessing import WINDOW_KEY
from deepsummit.core.inputs import WEATHER_CHANNELS, InputSet
from deepsummit.core.sections import DriftConfig
from deepsummit.drift.comparison import DriftReport, compare, compare_shift
from deepsummit.drift.profiling import profile

NOT_COMPARED = frozenset({"season"})
FEATURE_WINDOW_KEY = ("peakid", "smtdate")
STRATUM = "drift_stratum"  # the column naming a row's season and push week
STRATUM_NAME = "{} week {}"  # a stratum's name, of its season and push week: "Spring week 19"
WEEKS = 53  # weeks 1–53 of a year: day 1–7 is week 1, day 365 (and 366) week 53


def _push_week() -> pl.Expr:
    return (pl.col("smtdate").dt.ordinal_day() - 1) // 7 + 1


def with_stratum(rows: pl.DataFrame) -> pl.DataFrame:
    """`rows` (with their season and push day, smtdate) with the name of their stratum."""
    return rows.with_columns(pl.format(STRATUM_NAME, pl.col("season"), _push_week()).alias(STRATUM))


def _tabular(rows: pl.DataFrame, inputs: InputSet) -> tuple[pl.DataFrame, list[str], list[str]]:
    numeric = [n for n in inputs.numeric if n not in NOT_COMPARED]
    categorical = [n for n in (*inputs.categorical, *inputs.binary) if n not in NOT_COMPARED]
    frame = rows.select(pl.col(numeric).cast(pl.Float64), pl.col(categorical).cast(pl.String))
    return frame, numeric, categorical


def _weather(rows: pl.DataFrame, windows: pl.DataFrame, *kept: str) -> pl.DataFrame:
    """One row per attempt and token of its window (an attempt's weather counts once per
    member, as the model sees it), with the `kept` columns of its attempt."""
    keyed = windows.rename(dict(zip(WINDOW_KEY, FEATURE_WINDOW_KEY, strict=True)))
    return (
        rows.select(*FEATURE_WINDOW_KEY, *kept)
        .join(keyed, on=list(FEATURE_WINDOW_KEY))
        .select(*WEATHER_CHANNELS, *kept)
    )


def training_profile(
    train: pl.DataFrame, windows: pl.DataFrame, inputs: InputSet, description: str
) -> DistributionProfile:
    """The reference a model carries: its training rows' inputs and their weather, also per
    season and push week."""
    rows = with_stratum(train)
    frame, numeric, categorical = _tabular(rows, inputs)
    tabular = profile(
        frame.with_columns(rows[STRATUM]),
        numeric,
        categorical,
        description=description,
        strata=STRATUM,
    )
    weather = profile(
        _weather(rows, windows, STRATUM),
        WEATHER_CHANNELS,
        [],
        description=description,
        strata=STRATUM,
    )
    return tabular.merged(weather)


def same_season_and_weeks(
    reference: DistributionProfile, rows: pl.DataFrame, weeks_around: int
) -> DistributionProfile | None:
    """The reference rows of the seasons of `rows` whose push days fall within `weeks_around`
    weeks of theirs (described as such); None when the reference keeps no such rows (a
    profile from before the strata were kept has none)."""
    asked = rows.select("season", week=_push_week()).unique().iter_rows()
    wanted = {
        (season, (week - 1 + offset) % WEEKS + 1)
        for season, week in asked
        for offset in range(-weeks_around, weeks_around + 1)
    }
    found = sorted(pair for pair in wanted if STRATUM_NAME.format(*pair) in reference.strata)
    if not found:
        return None
    weeks: dict[str, list[int]] = {}
    for season, week in found:
        weeks.setdefault(season, []).append(week)
    spans = "; ".join(f"{season} weeks {_week_runs(w)}" for season, w in weeks.items())
    return reference.within(
        [STRATUM_NAME.format(*pair) for pair in found],
        f"the training rows of the same season and push weeks ({spans}: within "
        f"{weeks_around} weeks of those compared) of {reference.description}",
    )


def _week_runs(weeks: list[int]) -> str:
    """Weeks as runs, e.g. "16–22" or "50–53, 1–3" (a winter across the new year)."""
    ordered = sorted(weeks)
    runs: list[list[int]] = [[ordered[0], ordered[0]]]
    for week in ordered[1:]:
        if week == runs[-1][1] + 1:
            runs[-1][1] = week
        else:
            runs.append([week, week])
    if len(runs) > 1 and runs[0][0] == 1 and runs[-1][1] == WEEKS:
        runs = [runs[-1], *runs[:-1]]  # the run that crosses the new year reads from December
    return ", ".join(f"{a}–{b}" if a != b else str(a) for a, b in runs)


def weather_drift(
    reference: DistributionProfile,
    rows: pl.DataFrame,
    windows: pl.DataFrame,
    config: DriftConfig,
    description: str,
) -> DriftReport | None:
    """The weather tokens of `rows` (one per attempt and token) against the training rows of
    the same season and weeks; None without such rows."""
    like = same_season_and_weeks(reference, rows, config.weeks_around)
    return None if like is None else _weather_against(like, rows, windows, config, description)


def input_drift(
    reference: DistributionProfile,
    rows: pl.DataFrame,
    windows: pl.DataFrame,
    inputs: InputSet,
    config: DriftConfig,
    description: str,
) -> DriftReport | None:
    """`rows` (with their windows) against the training rows of the same season and weeks, on
    the inputs both share; None without such rows."""
    like = same_season_and_weeks(reference, rows, config.weeks_around)
    if like is None:
        return None
    frame, numeric, categorical = _tabular(rows, inputs)
    tabular = compare(
        like,
        frame,
        config.threshold,
        features=[n for n in (*numeric, *categorical) if n in like.features],
        min_rows=config.min_rows,
        description=description,
    )
    return tabular.combined(_weather_against(like, rows, windows, config, description))


def _weather_against(
    like: DistributionProfile,
    rows: pl.DataFrame,
    windows: pl.DataFrame,
    config: DriftConfig,
    description: str,
) -> DriftReport:
    return compare_shift(
        like,
        _weather(rows, windows),
        config.shift_threshold,
        features=[n for n in WEATHER_CHANNELS if n in like.numeric],
        threshold=config.threshold,
        min_rows=config.min_rows,
        description=description,
    )
