"""Validation of the clean tables: Pandera (polars) schemas and the split into clean / rejected.

Rows arrive as strings under the clean column names (`loaders`). `validate_table` types them
per cell (a cell that does not parse rejects its row with a reason), then checks the typed
rows against the table's Pandera model and routes every row named in `SchemaErrors.failure_cases`
to the rejected side with its reasons. The rules are written once per clean table, whatever
layout the rows came from.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from dataclasses import dataclass

import pandera.polars as pa
import polars as pl
from pandera.errors import SchemaErrors

from deepsummit.core.errors import PipelineError

# HDB season 0 (Unknown) is not among SEASONS: rejected.
from deepsummit.core.seasons import SEASON_OPENING_MONTH, SEASON_SLACK_MONTHS, SEASONS

ROW = "_row"
PARSE_ERROR = "_parse_error"

COORD_SOURCES = ("published", "parent-summit", "geocoded", "geocoded-suspect", "empty")
SEXES = ("M", "F")
FIRST_YEAR = 1900
THIS_YEAR = dt.date.today().year
AGE_RANGE = (1, 100)
# Peak heights: Everest is 8,849 m (2020 survey, 8,848.86). Recorded climbing heights use the
# Himalayan Database's Everest summit height, 8,850 m (1999 survey): every Everest summiteer's
# highpoint in the records is 8850, so that figure, not 8849, bounds a recorded height.
MAX_PEAK_HEIGHT_M = 8849
MAX_RECORDED_HEIGHT_M = 8850
# Upper bounds of the counts, far above anything recorded (the bundle's largest expedition has
# 99 members, 39 of them on the summit, and 34 camps) and far below the warehouse's INTEGER
# limit: a value beyond them is a typo or a corrupt cell, and its row is quarantined with it.
MAX_EXPEDITION_MEMBERS = 999
MAX_CAMPS = 99
NEPAL_LATITUDE = (26.3, 30.5)
NEPAL_LONGITUDE = (80.0, 88.3)
PUBLISHED_TOLERANCE_KM = 5.0

# Published summit coordinates (data/README.md, peaks.csv section: Wikipedia / standard published
# values). Sub-summits without their own value (`parent-summit`) carry their parent's position.
PUBLISHED_SUMMITS: dict[str, tuple[float, float]] = {
    "ANN1": (28.5956, 83.8203),
    "ANN2": (28.5358, 84.1214),
    "ANN4": (28.5375, 84.0828),
    "ANNE": (28.5956, 83.8203),
    "ANNM": (28.5956, 83.8203),
    "CHOY": (28.0942, 86.6608),
    "DHA1": (28.6967, 83.4875),
    "EVER": (27.9881, 86.9250),
    "GAN1": (28.3925, 85.1300),
    "GAUR": (27.9650, 86.3356),
    "KANC": (27.7025, 88.1475),
    "KANG": (27.7025, 88.1475),
    "KANS": (27.7025, 88.1475),
    "LHOM": (27.9609, 86.9389),
    "LHOT": (27.9617, 86.9333),
    "LSHR": (27.9583, 86.9433),
    "MACH": (28.4950, 83.9492),
    "MAKA": (27.8897, 87.0887),
    "MANA": (28.5497, 84.5597),
    "NUPT": (27.9664, 86.8900),
    "PK29": (28.5033, 84.5675),
    "TILI": (28.6844, 83.8044),
    "TUKU": (28.7461, 83.5589),
    "YALU": (27.7053, 88.1358),
    "YALW": (27.7053, 88.1358),
}


def _range(bounds: tuple[float, float]) -> dict[str, float]:
    return {"min_value": bounds[0], "max_value": bounds[1]}


_RECORDED_HEIGHT = _range((0, MAX_RECORDED_HEIGHT_M))
_YEARS = _range((FIRST_YEAR, THIS_YEAR))
_MEMBER_COUNT = _range((0, MAX_EXPEDITION_MEMBERS))


def _first_of_key(data: pa.PolarsData, keys: tuple[str, ...]) -> pl.LazyFrame:
    """True on the first row of each key; later duplicates fail (the first is kept)."""
    return data.lazyframe.select(pl.struct(keys).is_first_distinct())


class PeaksModel(pa.DataFrameModel):
    peakid: str = pa.Field(nullable=False)
    pkname: str = pa.Field(nullable=True)
    heightm: int = pa.Field(
        nullable=True, in_range={"min_value": 0, "max_value": MAX_PEAK_HEIGHT_M}
    )
    himal: str = pa.Field(nullable=True)
    location: str = pa.Field(nullable=True)
    latitude: float = pa.Field(nullable=True, in_range=_range(NEPAL_LATITUDE))
    longitude: float = pa.Field(nullable=True, in_range=_range(NEPAL_LONGITUDE))
    coord_source: str = pa.Field(nullable=False, isin=COORD_SOURCES)

    class Config:
        strict = True

    @pa.dataframe_check(error="duplicate key (peakid): the first row is kept")
    def unique_key(cls, data: pa.PolarsData) -> pl.LazyFrame:
        return _first_of_key(data, ("peakid",))

    @pa.dataframe_check(error="coordinates must be given exactly when coord_source is not 'empty'")
    def coordinates_match_source(cls, data: pa.PolarsData) -> pl.LazyFrame:
        given = pl.col("latitude").is_not_null() & pl.col("longitude").is_not_null()
        absent = pl.col("latitude").is_null() & pl.col("longitude").is_null()
        is_empty = pl.col("coord_source") == "empty"
        return data.lazyframe.select((given & ~is_empty) | (absent & is_empty))

    @pa.dataframe_check(
        error=f"published coordinates more than {PUBLISHED_TOLERANCE_KM:g} km from the "
        "published summit"
    )
    def consistent_with_published(cls, data: pa.PolarsData) -> pl.LazyFrame:
        reference_lat = pl.col("peakid").replace_strict(
            {k: v[0] for k, v in PUBLISHED_SUMMITS.items()}, default=None, return_dtype=pl.Float64
        )
        reference_lon = pl.col("peakid").replace_strict(
            {k: v[1] for k, v in PUBLISHED_SUMMITS.items()}, default=None, return_dtype=pl.Float64
        )
        distance = distance_km(
            pl.col("latitude"), pl.col("longitude"), reference_lat, reference_lon
        )
        claimed = pl.col("coord_source").is_in(["published", "parent-summit"])
        return data.lazyframe.select(
            ~claimed | reference_lat.is_null() | (distance <= PUBLISHED_TOLERANCE_KM)
        )


class ExpeditionsModel(pa.DataFrameModel):
    expid: str = pa.Field(nullable=False)
    peakid: str = pa.Field(nullable=False)
    year: int = pa.Field(nullable=False, in_range=_YEARS)
    season: str = pa.Field(nullable=False, isin=SEASONS)
    route1: str = pa.Field(nullable=True)
    totmembers: int = pa.Field(nullable=True, in_range=_MEMBER_COUNT)
    smtmembers: int = pa.Field(nullable=True, in_range=_MEMBER_COUNT)
    smtdate: dt.date = pa.Field(nullable=True)
    success: bool = pa.Field(nullable=False)
    termreason: str = pa.Field(nullable=True)
    highpoint: int = pa.Field(nullable=True, in_range=_RECORDED_HEIGHT)
    o2used: bool = pa.Field(nullable=True)
    commercial: bool = pa.Field(nullable=True)
    camps: int = pa.Field(nullable=True, in_range=_range((0, MAX_CAMPS)))
    style: str = pa.Field(nullable=True)
    source: str = pa.Field(nullable=False)

    class Config:
        strict = True

    @pa.dataframe_check(error="duplicate key (expid, year): the first row is kept")
    def unique_key(cls, data: pa.PolarsData) -> pl.LazyFrame:
        return _first_of_key(data, ("expid", "year"))

    @pa.dataframe_check(
        error=f"smtdate outside its season (the season's three months and {SEASON_SLACK_MONTHS} "
        "month either side)"
    )
    def summit_date_in_season(cls, data: pa.PolarsData) -> pl.LazyFrame:
        month = pl.col("season").replace_strict(SEASON_OPENING_MONTH, default=None)
        opening = pl.date(pl.col("year"), month, 1)
        first = opening.dt.offset_by(f"-{SEASON_SLACK_MONTHS}mo")
        after = opening.dt.offset_by(f"{3 + SEASON_SLACK_MONTHS}mo")
        date = pl.col("smtdate")
        return data.lazyframe.select(date.is_null() | ((date >= first) & (date < after)))

    @pa.dataframe_check(error="smtmembers > totmembers: more summiters than climbing members")
    def summiters_among_members(cls, data: pa.PolarsData) -> pl.LazyFrame:
        both = pl.col("smtmembers").is_not_null() & pl.col("totmembers").is_not_null()
        return data.lazyframe.select(~both | (pl.col("smtmembers") <= pl.col("totmembers")))


class ExpeditionDetailsModel(pa.DataFrameModel):
    """The TidyTuesday expeditions layout: what the expedition knew before the push (base-camp
    date, agency, team and staff sizes) and what it recorded after (kept, never a model input:
    deepsummit/core/inputs.py)."""

    expid: str = pa.Field(nullable=False)
    year: int = pa.Field(nullable=False, in_range=_YEARS)
    peakid: str = pa.Field(nullable=False)
    season: str = pa.Field(nullable=False, isin=SEASONS)
    basecamp_date: dt.date = pa.Field(nullable=True)
    highpoint_date: dt.date = pa.Field(nullable=True)
    termination_date: dt.date = pa.Field(nullable=True)
    termination_reason: str = pa.Field(nullable=True)
    highpoint_metres: int = pa.Field(nullable=True, in_range=_RECORDED_HEIGHT)
    members: int = pa.Field(nullable=True, in_range=_MEMBER_COUNT)
    member_deaths: int = pa.Field(nullable=True, in_range=_MEMBER_COUNT)
    hired_staff: int = pa.Field(nullable=True, in_range=_MEMBER_COUNT)
    hired_staff_deaths: int = pa.Field(nullable=True, in_range=_MEMBER_COUNT)
    oxygen_used: bool = pa.Field(nullable=True)
    trekking_agency: str = pa.Field(nullable=True)
    source: str = pa.Field(nullable=False)

    class Config:
        strict = True

    @pa.dataframe_check(error="duplicate key (expid, year): the first row is kept")
    def unique_key(cls, data: pa.PolarsData) -> pl.LazyFrame:
        return _first_of_key(data, ("expid", "year"))

    @pa.dataframe_check(error="basecamp_date after highpoint_date")
    def base_camp_before_the_high_point(cls, data: pa.PolarsData) -> pl.LazyFrame:
        both = pl.col("basecamp_date").is_not_null() & pl.col("highpoint_date").is_not_null()
        return data.lazyframe.select(~both | (pl.col("basecamp_date") <= pl.col("highpoint_date")))


class MembersModel(pa.DataFrameModel):
    expedition_id: str = pa.Field(nullable=False)
    member_id: str = pa.Field(nullable=False)
    peakid: str = pa.Field(nullable=False)
    year: int = pa.Field(nullable=False, in_range=_YEARS)
    season: str = pa.Field(nullable=False, isin=SEASONS)
    sex: str = pa.Field(nullable=True, isin=SEXES)
    age: int = pa.Field(nullable=True, in_range=_range(AGE_RANGE))
    citizenship: str = pa.Field(nullable=True)
    expedition_role: str = pa.Field(nullable=True)
    hired: bool = pa.Field(nullable=True)
    highpoint_metres: int = pa.Field(nullable=True, in_range=_RECORDED_HEIGHT)
    success: bool = pa.Field(nullable=False)
    solo: bool = pa.Field(nullable=True)
    oxygen_used: bool = pa.Field(nullable=True)
    died: bool = pa.Field(nullable=True)
    death_cause: str = pa.Field(nullable=True)
    death_height_metres: int = pa.Field(nullable=True, in_range=_RECORDED_HEIGHT)
    injured: bool = pa.Field(nullable=True)
    injury_type: str = pa.Field(nullable=True)
    injury_height_metres: int = pa.Field(nullable=True, in_range=_RECORDED_HEIGHT)
    climber_id: str = pa.Field(nullable=True)
    source: str = pa.Field(nullable=False)

    class Config:
        strict = True

    @pa.dataframe_check(error="duplicate key (member_id, year): the first row is kept")
    def unique_key(cls, data: pa.PolarsData) -> pl.LazyFrame:
        return _first_of_key(data, ("member_id", "year"))


MODELS: dict[str, type[pa.DataFrameModel]] = {
    "peaks": PeaksModel,
    "expeditions": ExpeditionsModel,
    "expedition_details": ExpeditionDetailsModel,
    "members": MembersModel,
}
KEYS: dict[str, tuple[str, ...]] = {
    "peaks": ("peakid",),
    "expeditions": ("expid", "year"),
    "expedition_details": ("expid", "year"),
    "members": ("member_id", "year"),
}


@dataclass(frozen=True)
class Split:
    """A table's rows divided: typed clean rows, and rejected rows (`_row`, `reason`)."""

    clean: pl.DataFrame
    rejected: pl.DataFrame


def columns_of(table: str) -> dict[str, pl.DataType]:
    """The clean table's columns and their Polars types, in warehouse order."""
    schema = MODELS[table].to_schema()
    return {name: column.dtype.type for name, column in schema.columns.items()}


def validate_table(
    frame: pl.DataFrame, table: str, known_peaks: Collection[str] | None = None
) -> Split:
    """Type `frame` (strings under the clean names, plus `_row`) and check it against the
    table's model; `known_peaks` adds the rule that `peakid` names a loaded peak."""
    typed = parse_strings(frame, columns_of(table))
    unparsed = typed.filter(pl.col(PARSE_ERROR).is_not_null()).select(
        ROW, reason=pl.col(PARSE_ERROR)
    )
    parsed = typed.filter(pl.col(PARSE_ERROR).is_null()).drop(PARSE_ERROR)
    schema = MODELS[table].to_schema()
    if known_peaks is not None:
        known = pa.Check.isin(sorted(set(known_peaks)), error="unknown peak id (not in peaks)")
        schema = schema.update_column("peakid", checks=[*schema.columns["peakid"].checks, known])
    body = parsed.drop(ROW)
    try:
        schema.validate(body, lazy=True)
        failed = pl.DataFrame(schema={"index": pl.Int64, "reason": pl.String})
    except SchemaErrors as errors:
        failed = _reasons_by_row(table, errors.failure_cases)
    positions = parsed.with_row_index("index").with_columns(pl.col("index").cast(pl.Int64))
    rejected_rows = positions.join(failed, on="index", how="inner").select(ROW, "reason")
    clean = positions.join(failed, on="index", how="anti").drop("index")
    rejected = pl.concat([unparsed, rejected_rows]).sort(ROW)
    return Split(clean=clean, rejected=rejected)


def _reasons_by_row(table: str, failure_cases: pl.DataFrame) -> pl.DataFrame:
    """One reason line per failing row: `column = value: check`, several joined by `; `."""
    if failure_cases["index"].null_count():
        first = failure_cases.filter(pl.col("index").is_null()).row(0, named=True)
        raise PipelineError(f"{table}: schema does not fit the table ({first['check']})")
    value = pl.col("failure_case").fill_null("null")
    reason = (
        pl.when(pl.col("schema_context") == "Column")
        .then(pl.format("{} = {}: {}", "column", value, "check"))
        .otherwise(pl.col("check"))
    )
    return (
        failure_cases.with_columns(reason=reason, index=pl.col("index").cast(pl.Int64))
        .group_by("index", maintain_order=True)
        .agg(pl.col("reason").unique(maintain_order=True).str.join("; "))
    )


# --- typing strings -----------------------------------------------------------------------------

_TRUE = ("true", "t", "yes", "y", "1")
_FALSE = ("false", "f", "no", "n", "0")
_DATE_FORMATS = ("%Y-%m-%d", "%Y%m%d", "%m/%d/%Y")  # ISO, DBF, the HDB program's US dates


def parse_strings(frame: pl.DataFrame, columns: dict[str, pl.DataType]) -> pl.DataFrame:
    """Each column typed from its strings, plus `_parse_error` naming every cell that does not
    parse (null when the row parsed). Missing cells are already null (see records)."""
    typed: list[pl.Expr] = []
    errors: list[pl.Expr] = []
    for name, dtype in columns.items():
        value, problem = _typed(name, dtype)
        typed.append(value.alias(name))
        cell = pl.col(name)
        errors.append(
            pl.when(cell.is_not_null() & value.is_null()).then(
                pl.format("{} = '{}': {}", pl.lit(name), cell, problem)
            )
        )
    joined = pl.concat_str(errors, separator="; ", ignore_nulls=True)
    return frame.select(
        ROW,
        *typed,
        pl.when(joined == "").then(None).otherwise(joined).alias(PARSE_ERROR),
    )


def _typed(name: str, dtype: pl.DataType) -> tuple[pl.Expr, pl.Expr]:
    """The typed value (null where the cell does not parse) and why a cell did not parse."""
    text = pl.col(name).str.strip_chars()
    if dtype == pl.String:
        return text, pl.lit("not text")
    if dtype == pl.Boolean:
        lowered = text.str.to_lowercase()
        value = pl.when(lowered.is_in(_TRUE)).then(True).when(lowered.is_in(_FALSE)).then(False)
        return value, pl.lit("not a boolean")
    if dtype == pl.Date:
        value = pl.coalesce(text.str.to_date(fmt, strict=False) for fmt in _DATE_FORMATS)
        return value, pl.lit("not a calendar date")
    number = text.cast(pl.Float64, strict=False)
    if dtype == pl.Float64:
        return number, pl.lit("not a number")
    # Integers may be written as 7937.0 (the bundle's expeditions); 7937.5 is not an integer.
    # Not a strict cast: Polars casts the whole column, and one cell beyond Int64 (1e30) would
    # abort the load instead of costing its row. Within Int64, the models' bounds judge it.
    whole = number.is_finite() & (number == number.round(0))
    value = pl.when(whole).then(number.cast(pl.Int64, strict=False))
    problem = (
        pl.when(whole).then(pl.lit("integer out of range")).otherwise(pl.lit("not an integer"))
    )
    return value, problem


def distance_km(lat1: pl.Expr, lon1: pl.Expr, lat2: pl.Expr, lon2: pl.Expr) -> pl.Expr:
    """Great-circle (haversine) distance in km."""
    phi1, phi2 = lat1.radians(), lat2.radians()
    half_dphi = (phi2 - phi1) / 2
    half_dlambda = (lon2.radians() - lon1.radians()) / 2
    a = half_dphi.sin() ** 2 + phi1.cos() * phi2.cos() * half_dlambda.sin() ** 2
    return 2 * 6371.0088 * a.sqrt().arcsin()
