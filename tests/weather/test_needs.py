"""Which spans the attempts need: windows merged, gaps kept, stored days and bad peaks left out."""

from __future__ import annotations

from datetime import date, timedelta

from weather_fixtures import load_mini_tables, mini_warehouse  # noqa: F401 (fixture)

from deepsummit.core.config import Settings
from deepsummit.core.warehouse import connect
from deepsummit.weather import needs, store


def spans_of(settings: Settings) -> list[tuple[str, date, date]]:
    with connect(settings.paths.warehouse) as con:
        store.ensure_tables(con)
        needs.prepare_needed_days(con)
        frame = needs.missing_spans(con, "open-meteo", settings.weather)
    return list(frame.select("peakid", "start_date", "end_date").iter_rows())


def test_overlapping_windows_merge_and_gaps_stay(mini_warehouse: Settings) -> None:  # noqa: F811
    assert sorted(spans_of(mini_warehouse)) == [
        # 1940-02-10 window clipped at ERA5's first day
        ("EVER", date(1940, 1, 1), date(1940, 2, 10)),
        ("EVER", date(2018, 5, 16) - timedelta(days=89), date(2018, 5, 16)),
        # 2019-05-20 and 2019-05-23 windows overlap: one span of 93 days
        ("EVER", date(2019, 5, 20) - timedelta(days=89), date(2019, 5, 23)),
        ("LHOT", date(2019, 5, 20) - timedelta(days=89), date(2019, 5, 20)),
    ]


def test_skipped_peaks_are_reported_with_reasons(mini_warehouse: Settings) -> None:  # noqa: F811
    with connect(mini_warehouse.paths.warehouse) as con:
        skipped = needs.skipped_peaks(con)
    assert [(s.peakid, s.reason) for s in skipped] == [
        ("BAUD", "coordinates flagged geocoded-suspect"),
        ("PTHN", "no coordinates"),
    ]


def test_stored_days_are_not_asked_again(mini_warehouse: Settings) -> None:  # noqa: F811
    with connect(mini_warehouse.paths.warehouse) as con:
        store.ensure_tables(con)
        # store 2019-03-01 .. 2019-03-10 for EVER: its 2019 span splits around them
        con.execute(
            "INSERT INTO weather_daily (peakid, date, source, fetched_at, request_id) "
            "SELECT 'EVER', d::DATE, 'open-meteo', now(), 'test' "
            "FROM range(DATE '2019-03-01', DATE '2019-03-11', INTERVAL 1 DAY) t(d)"
        )
    ever_2019 = [s for s in spans_of(mini_warehouse) if s[0] == "EVER" and s[1].year == 2019]
    assert ever_2019 == [
        ("EVER", date(2019, 2, 20), date(2019, 2, 28)),
        ("EVER", date(2019, 3, 11), date(2019, 5, 23)),
    ]


def test_coverage_counts_days_before_era5(mini_warehouse: Settings) -> None:  # noqa: F811
    with connect(mini_warehouse.paths.warehouse) as con:
        store.ensure_tables(con)
        needs.prepare_needed_days(con)
        rows = {
            r["peakid"]: r
            for r in needs.coverage(con, "open-meteo", mini_warehouse.weather).iter_rows(named=True)
        }
    assert rows["EVER"]["needed_days"] == 90 + 90 + 93
    assert rows["EVER"]["before_first_date"] == 90 - 41
    assert rows["EVER"]["missing_days"] == 41 + 90 + 93
    assert set(rows) == {"EVER", "LHOT"}
