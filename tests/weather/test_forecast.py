"""The forecast client: the real openmeteo-requests client against the local server's
`/v1/forecast`, one request per peak covering the window and two weeks ahead, stored under the
forecast's issue time, cached for a while, and through the archive client's faults."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from zoneinfo import ZoneInfo

import polars as pl
import pytest
from openmeteo_server import OpenMeteoServer, open_meteo_weight
from weather_fixtures import load_mini_tables, weather_settings

from deepsummit.core.config import Settings, load_settings
from deepsummit.core.context import RunContext
from deepsummit.core.errors import PipelineError, QuotaExhausted
from deepsummit.core.warehouse import connect
from deepsummit.weather.forecast import ISSUE_FORMAT, issued_at, newest_forecast
from deepsummit.weather.stage import load_forecast

PEAKS = ["EVER", "MANA"]


@pytest.fixture(scope="module")
def server():
    with OpenMeteoServer() as running:
        yield running


@pytest.fixture(autouse=True)
def fresh_server(server: OpenMeteoServer):
    with server.one_test():
        yield


def forecast_settings(tmp_path: Path, server: OpenMeteoServer, **forecast) -> Settings:
    base = weather_settings(tmp_path)
    overrides = {
        **base.model_dump(mode="json", include={"paths", "weather"}),
        "forecast": {
            "api_url": server.forecast_url,
            "cache_path": str(tmp_path / "cache" / "forecast"),
            **forecast,
        },
        "outlook": {"peaks": PEAKS},
    }
    settings = load_settings(overrides=overrides)
    with connect(settings.paths.warehouse) as con:
        load_mini_tables(con)
    return settings


def forecast_rows(settings: Settings) -> pl.DataFrame:
    with connect(settings.paths.warehouse, read_only=True) as con:
        return con.sql(
            "SELECT peakid, date, source FROM weather_daily "
            "WHERE starts_with(source, 'forecast@') ORDER BY peakid, date"
        ).pl()


def nepal_today() -> dt.date:
    return dt.datetime.now(ZoneInfo("Asia/Kathmandu")).date()


def test_one_request_per_peak_covers_the_window_and_two_weeks_ahead(
    tmp_path: Path, server: OpenMeteoServer
) -> None:
    settings = forecast_settings(tmp_path, server)
    before = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0, tzinfo=None)

    report = load_forecast(settings, RunContext(tmp_path / "run"))

    assert server.requests == report.requests == 2
    assert report.weighted_calls == pytest.approx(2 * open_meteo_weight(15, 92 + 16, 1))
    assert {(e["params"]["past_days"], e["params"]["forecast_days"]) for e in server.log} == {
        ("92", "16")
    }
    rows = forecast_rows(settings)
    today = nepal_today()
    for peakid in PEAKS:
        days = rows.filter(pl.col("peakid") == peakid)["date"]
        assert (
            days.to_list()
            == pl.date_range(
                today - dt.timedelta(days=92), today + dt.timedelta(days=15), eager=True
            ).to_list()
        )
    (source,) = rows["source"].unique().to_list()
    assert before <= issued_at(source) <= dt.datetime.now(dt.UTC).replace(tzinfo=None)
    assert {p.source for p in report.peaks} == {source}
    assert [p.stored_days for p in report.peaks] == [108, 108]


def test_a_cached_forecast_is_not_asked_again_and_keeps_its_issue_time(
    tmp_path: Path, server: OpenMeteoServer
) -> None:
    settings = forecast_settings(tmp_path, server)
    first = load_forecast(settings, RunContext(tmp_path / "run"))
    second = load_forecast(settings, RunContext(tmp_path / "run"))

    assert server.requests == 2 and second.requests == 0
    assert [p.source for p in second.peaks] == [p.source for p in first.peaks]
    assert forecast_rows(settings).height == 2 * 108  # not duplicated
    assert second.digest == first.digest


def test_the_newest_issue_of_each_peak_feeds_an_outlook(tmp_path: Path, server) -> None:
    settings = forecast_settings(tmp_path, server)
    load_forecast(settings, RunContext(tmp_path / "run"), peakids=["EVER"])
    with connect(settings.paths.warehouse) as con:  # an older issue of EVER, kept alongside
        older = (dt.datetime(2020, 1, 1, 6, 0)).strftime(f"forecast@{ISSUE_FORMAT}")
        con.execute(
            "INSERT INTO weather_daily SELECT * REPLACE ($older AS source) FROM weather_daily",
            {"older": older},
        )
        newest = newest_forecast(con, PEAKS)

    assert set(newest.sources) == {"EVER"}  # MANA has none
    assert newest.sources["EVER"] != older
    assert newest.daily["source"].unique().to_list() == [newest.sources["EVER"]]


def test_transient_faults_are_retried_like_the_archive_s(tmp_path: Path, server) -> None:
    settings = forecast_settings(tmp_path, server)
    server.inject("429", "500")

    report = load_forecast(settings, RunContext(tmp_path / "run"), sleep=lambda s: None)

    assert report.problem is None
    assert forecast_rows(settings).height == 2 * 108


def test_a_response_with_the_wrong_days_is_rejected_and_asked_again_next_run(
    tmp_path: Path, server
) -> None:
    settings = forecast_settings(tmp_path, server)
    server.inject("short")  # the first peak's answer is a day short

    report = load_forecast(settings, RunContext(tmp_path / "run"), sleep=lambda s: None)

    assert report.problem == "1 forecast responses rejected; a retry asks again"
    assert "EVER: dates" in report.rejected[0]
    assert forecast_rows(settings)["peakid"].unique().to_list() == ["MANA"]
    again = load_forecast(settings, RunContext(tmp_path / "run"), sleep=lambda s: None)
    assert again.problem is None and forecast_rows(settings).height == 2 * 108


def test_the_daily_limit_stops_with_one_line(tmp_path: Path, server) -> None:
    settings = forecast_settings(tmp_path, server)
    server.daily_limit = open_meteo_weight(15, 108, 1)  # one peak's worth

    with pytest.raises(QuotaExhausted, match="forecast: Open-Meteo refused: Daily API request"):
        load_forecast(settings, RunContext(tmp_path / "run"), sleep=lambda s: None)
    assert forecast_rows(settings)["peakid"].unique().to_list() == ["EVER"]  # kept


@pytest.mark.parametrize(
    ("peakid", "message"),
    [
        (
            "BAUD",
            r"BAUD: no day-by-day outlook, there are no trusted coordinates for a summit "
            r"forecast \(coord_source 'geocoded-suspect'.*or ask with --without-weather",
        ),
        ("XXXX", r"unknown peak 'XXXX': not in the warehouse's peaks table"),
    ],
)
def test_a_peak_without_trusted_coordinates_is_refused_before_any_request(
    tmp_path: Path, server, peakid: str, message: str
) -> None:
    settings = forecast_settings(tmp_path, server)
    with pytest.raises(PipelineError, match=message):
        load_forecast(settings, RunContext(tmp_path / "run"), peakids=["EVER", peakid])
    assert server.requests == 0


def test_asked_without_weather_an_untrusted_peak_is_left_out_of_the_requests(
    tmp_path: Path, server
) -> None:
    """outlook.without_weather: the outlook answers BAUD without weather, so its forecast is
    not asked for; EVER's still is."""
    settings = forecast_settings(tmp_path, server)
    settings = settings.model_copy(
        update={"outlook": settings.outlook.model_copy(update={"without_weather": True})}
    )
    report = load_forecast(settings, RunContext(tmp_path / "run"), peakids=["EVER", "BAUD"])
    assert [peak.peakid for peak in report.peaks] == ["EVER"]
    assert server.requests == 1
    assert forecast_rows(settings)["peakid"].unique().to_list() == ["EVER"]
