"""Loading the bundled ERA5 archive into weather_daily through load_weather (the default)."""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path

import polars as pl
import pytest
from weather_fixtures import DATA_DIR, load_bundle_tables, load_mini_tables, weather_settings

from deepsummit.core.context import RunContext
from deepsummit.core.errors import SourceUnreadable
from deepsummit.core.warehouse import connect
from deepsummit.weather import load_weather
from deepsummit.weather.archive import read_archive

# data/README.md section 4: rows per peak (EVER and MAKA each miss 1,826 days).
README_ROWS = {
    "ANN1": 31_047,
    "CHOY": 31_047,
    "DHA1": 31_047,
    "EVER": 29_221,
    "KANG": 31_047,
    "LHOT": 31_047,
    "MAKA": 29_221,
    "MANA": 31_047,
}


# Data README, section 4: the two gaps of the archive, absent rows.
README_GAPS = {
    "EVER": pl.date_range(date(1945, 1, 1), date(1949, 12, 31), eager=True).to_list(),
    "MAKA": pl.date_range(date(1990, 1, 1), date(1994, 12, 31), eager=True).to_list(),
}


def needed_days(peakid: str) -> set[date]:
    """The days of the 90-day windows ending on the peak's expedition dates that have member
    rows, computed from the bundle's files (independently of the stage's SQL)."""
    expeditions = pl.read_csv(DATA_DIR / "himalayan/expeditions.csv", try_parse_dates=True)
    members = pl.read_csv(
        DATA_DIR / "himalayan/members.csv.gz", columns=["expedition_id", "year"]
    ).unique()
    dates = (
        expeditions.filter((pl.col("peakid") == peakid) & pl.col("smtdate").is_not_null())
        .join(members, left_on=["expid", "year"], right_on=["expedition_id", "year"])
        .get_column("smtdate")
        .unique()
    )
    return {day - timedelta(days=back) for day in dates.to_list() for back in range(90)}


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("archive")
    settings = weather_settings(tmp)
    with connect(settings.paths.warehouse) as con:
        load_bundle_tables(con)
    first = load_weather(settings, RunContext(tmp / "run1"))
    second = load_weather(settings, RunContext(tmp / "run2"))
    return settings, first, second


def test_rows_per_peak_match_the_data_readme(loaded) -> None:
    settings, first, _ = loaded
    with connect(settings.paths.warehouse, read_only=True) as con:
        counts = dict(
            con.execute(
                "SELECT peakid, count(*) FROM weather_daily WHERE source = 'archive' GROUP BY 1"
            ).fetchall()
        )
    assert counts == README_ROWS
    assert {p.peakid: p.stored_days for p in first.peaks if p.stored_days} == README_ROWS
    assert first.stored == sum(README_ROWS.values()) and first.quarantined == 0


def test_null_stays_null(loaded) -> None:
    settings, _, _ = loaded
    with connect(settings.paths.warehouse, read_only=True) as con:
        always_null = con.execute(
            "SELECT count(precipitation_hours), count(shortwave_radiation_sum), "
            "count(et0_fao_evapotranspiration) FROM weather_daily"
        ).fetchone()
        first_day = con.execute(
            "SELECT count(*), count(precipitation_sum), count(temperature_2m_mean) "
            "FROM weather_daily WHERE date = DATE '1940-01-01'"
        ).fetchone()
    assert always_null == (0, 0, 0)
    assert first_day == (8, 0, 8)  # forecast fields do not exist on ERA5's first day


def test_rerun_is_idempotent_and_reports_coverage(loaded) -> None:
    _, first, second = loaded
    assert second.rows == first.rows == sum(README_ROWS.values())
    assert second.digest == first.digest
    peaks = {p.peakid: p for p in second.peaks}
    # The data README's gaps (absent rows): every needed day inside them is missing, no other.
    archive_peaks = [peaks[peakid] for peakid in README_ROWS]
    assert {p.peakid: p.missing_days for p in archive_peaks if p.missing_days} == {
        peakid: len(needed_days(peakid) & set(gap)) for peakid, gap in README_GAPS.items()
    }
    assert peaks["EVER"].before_first_date == len(
        {day for day in needed_days("EVER") if day < date(1940, 1, 1)}
    )
    assert second.complete
    assert "BAUD" in {s.peakid for s in second.skipped}
    assert "| EVER | 29,221 |" in second.render()


def test_unreadable_archive_is_one_clear_line(tmp_path: Path) -> None:
    with pytest.raises(SourceUnreadable, match="no such file"):
        read_archive(tmp_path / "nope.parquet")
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1 not really")
    with pytest.raises(SourceUnreadable, match="not a readable parquet"):
        read_archive(broken)


def test_rows_of_peaks_without_weather_are_quarantined_with_why_once(tmp_path: Path) -> None:
    days = (
        pl.read_parquet(DATA_DIR / "weather/era5_daily.parquet")
        .filter((pl.col("peakid") == "EVER") & (pl.col("date") >= date(2019, 5, 1)))
        .head(3)
        .with_columns(pl.col("peakid").cast(pl.String))
    )
    # Rows 1-3 of a peak with weather, 4-6 of a peak the records do not know, 7-9 of a peak
    # whose coordinates are flagged geocoded-suspect (the mini records' BAUD).
    path = tmp_path / "archive.parquet"
    pl.concat(
        [days, *(days.with_columns(peakid=pl.lit(p)) for p in ("NOPE", "BAUD"))]
    ).write_parquet(path)
    settings = weather_settings(tmp_path, archive_path=str(path))
    with connect(settings.paths.warehouse) as con:
        load_mini_tables(con)

    first = load_weather(settings, RunContext(tmp_path / "run1"))
    second = load_weather(settings, RunContext(tmp_path / "run2"))  # the same file again

    with connect(settings.paths.warehouse, read_only=True) as con:
        quarantined = con.execute(
            "SELECT source, row_number, record::JSON->>'peakid', reason FROM quarantine "
            "WHERE table_name = 'weather_daily' ORDER BY row_number"
        ).fetchall()
    coordinates = "peak without usable coordinates (none, or flagged geocoded-suspect)"
    assert quarantined == [
        # in the records stage's words for an expedition or member of an unknown peak
        *((str(path), row, "NOPE", "unknown peak id (not in peaks)") for row in (4, 5, 6)),
        *((str(path), row, "BAUD", coordinates) for row in (7, 8, 9)),
    ]
    assert second.rows == first.rows == 3
    assert (first.fetched, first.stored, first.quarantined) == (9, 3, 6)
    assert first.fetched == first.stored + first.quarantined + first.rejected_rows
