"""The real openmeteo-requests client against the local Open-Meteo server, through every fault."""

from __future__ import annotations

import subprocess
import sys
from datetime import date
from pathlib import Path

import polars as pl
import pytest
import requests
import requests_cache
from openmeteo_server import OpenMeteoServer, open_meteo_weight
from weather_fixtures import DATA_DIR, MINI_ATTEMPTS, load_mini_tables, weather_settings

from deepsummit.core.config import Settings
from deepsummit.core.context import RunContext
from deepsummit.core.errors import QuotaExhausted
from deepsummit.core.inputs import WEATHER_VARIABLES
from deepsummit.core.warehouse import connect
from deepsummit.weather import load_weather
from deepsummit.weather.cost import DAY_S, RateLimiter
from deepsummit.weather.openmeteo import OpenMeteoSource, response_frame
from deepsummit.weather.plan import Location, PlannedRequest

# The mini attempts need EVER 1940-01-01..02-10 (41 days), EVER 2018 (90), LHOT 2019 (90) and
# EVER 2019 (93): four requests, in that order.
MINI_DAYS = 41 + 90 + 90 + 93
MINI_WEIGHT = sum(open_meteo_weight(15, days, 1) for days in (41, 90, 90, 93))


@pytest.fixture(scope="module")
def server():
    with OpenMeteoServer(stall_s=1.0) as running:
        yield running


@pytest.fixture(autouse=True)
def fresh_server(server: OpenMeteoServer):
    with server.one_test():
        yield


def om_settings(tmp_path: Path, server: OpenMeteoServer, **weather) -> Settings:
    settings = weather_settings(
        tmp_path, source="open-meteo", api_url=server.url, timeout_s=0.5, **weather
    )
    with connect(settings.paths.warehouse) as con:
        if not con.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'peaks'"
        ).fetchone()[0]:
            load_mini_tables(con)
    return settings


def stored(settings: Settings) -> pl.DataFrame:
    with connect(settings.paths.warehouse, read_only=True) as con:
        return con.sql(
            "SELECT * EXCLUDE (fetched_at, request_id) FROM weather_daily ORDER BY peakid, date"
        ).pl()


def test_progress_counts_requests_done_and_today_s_weighted_calls(
    tmp_path: Path, server: OpenMeteoServer
) -> None:
    settings = om_settings(tmp_path, server)
    reports: list[tuple[float, float, str]] = []

    load_weather(
        settings,
        RunContext(tmp_path / "run", progress=lambda *report: reports.append(report)),
    )

    assert [(done, total) for done, total, _ in reports] == [(1, 4), (2, 4), (3, 4), (4, 4)]
    spent = float(reports[-1][2].split(" of ")[0].replace(",", ""))
    assert spent == pytest.approx(MINI_WEIGHT, abs=0.05)
    assert reports[-1][2].endswith("of 10,000 weighted calls used today")


def test_fetches_only_needed_spans_and_counts_calls_like_the_server(
    tmp_path: Path, server: OpenMeteoServer
) -> None:
    settings = om_settings(tmp_path, server)
    report = load_weather(settings, RunContext(tmp_path / "run"))
    assert report.complete and report.rows == MINI_DAYS
    assert server.requests == report.requests == 4
    assert server.weighted_calls == pytest.approx(report.weighted_calls)
    assert report.weighted_calls == pytest.approx(MINI_WEIGHT)
    params = server.log[0]["params"]
    assert (params["models"], params["timezone"], params["elevation"]) == (
        "era5",
        "Asia/Kathmandu",
        "8849",
    )
    archive = pl.read_parquet(DATA_DIR / "weather/era5_daily.parquet").filter(
        (pl.col("peakid") == "EVER") & (pl.col("date") == date(2019, 5, 23))
    )
    row = stored(settings).filter(
        (pl.col("peakid") == "EVER") & (pl.col("date") == date(2019, 5, 23))
    )
    assert row["temperature_2m_mean"][0] == pytest.approx(
        archive["temperature_2m_mean"][0], abs=1e-6
    )
    assert row["precipitation_hours"][0] is None  # NaN from the server stays NULL

    again = load_weather(
        settings, RunContext(tmp_path / "run2")
    )  # nothing missing: no request at all
    assert (server.requests, again.requests, again.digest) == (4, 0, report.digest)

    with connect(settings.paths.warehouse) as con:
        con.execute("DELETE FROM weather_daily")
    cached = load_weather(settings, RunContext(tmp_path / "run3"))  # answered from the local cache
    assert (server.requests, cached.requests, cached.digest) == (4, 0, report.digest)


@pytest.mark.parametrize(
    ("fault", "expected_sleep"),
    [("429", 1.0), ("429-no-retry-after", 0.01)],  # Retry-After, else backoff_factor × 2^0
)
def test_rate_limit_answers_are_waited_out(
    tmp_path: Path, server: OpenMeteoServer, fault: str, expected_sleep: float
) -> None:
    settings = om_settings(tmp_path, server, backoff_max_s=30.0)
    sleeps: list[float] = []
    server.inject(fault)
    report = load_weather(settings, RunContext(tmp_path / "run"), sleep=sleeps.append)
    assert sleeps == [pytest.approx(expected_sleep)]
    assert report.complete and report.rows == MINI_DAYS
    assert server.requests == report.requests == 5


@pytest.mark.parametrize("fault", ["500", "stall"])
def test_server_errors_and_stalls_are_retried(
    tmp_path: Path, server: OpenMeteoServer, fault: str
) -> None:
    settings = om_settings(tmp_path, server)
    server.inject(fault)
    report = load_weather(settings, RunContext(tmp_path / "run"))
    assert report.complete and report.rows == MINI_DAYS
    assert server.requests == 5  # urllib3 retried the failed one once
    assert [entry["fault"] for entry in server.log][:2] == [fault, None]


@pytest.mark.parametrize("fault", ["truncate", "short", "shift"])
def test_bad_responses_are_rejected_not_stored_and_asked_again(
    tmp_path: Path, server: OpenMeteoServer, fault: str
) -> None:
    settings = om_settings(tmp_path, server)
    server.inject(fault)  # hits the first request: EVER 1940-01-01..02-10
    report = load_weather(settings, RunContext(tmp_path / "run"))
    assert not report.complete and len(report.rejected) == 1
    assert report.rows == MINI_DAYS - 41
    assert stored(settings).filter(pl.col("date").dt.year() == 1940).is_empty()
    assert "INCOMPLETE" in report.render()

    rerun = load_weather(settings, RunContext(tmp_path / "run2"))
    assert rerun.complete and rerun.rows == MINI_DAYS
    assert server.requests == 5  # the rejected answer was evicted from the cache


def test_daily_limit_stops_cleanly_and_the_next_run_completes(
    tmp_path: Path, server: OpenMeteoServer
) -> None:
    settings = om_settings(tmp_path / "interrupted", server)
    server.daily_limit = 15.0  # the first two requests cost 14.0, the third does not fit
    with pytest.raises(QuotaExhausted, match="Daily API request limit exceeded") as error:
        load_weather(settings, RunContext(tmp_path / "run1"))
    assert "still missing" in str(error.value) and "\n" not in str(error.value)
    assert len(stored(settings)) == 41 + 90
    assert (tmp_path / "run1" / "weather_report.md").read_text().count("stopped early") == 1

    server.reset_counts()  # the next day: a fresh budget
    server.daily_limit = 30.0
    resumed = load_weather(settings, RunContext(tmp_path / "run2"))
    assert resumed.complete and resumed.requests == 2  # only what was missing

    server.daily_limit = None
    uninterrupted = om_settings(tmp_path / "straight", server)
    straight = load_weather(uninterrupted, RunContext(tmp_path / "run3"))
    assert stored(settings).equals(stored(uninterrupted))
    assert resumed.digest == straight.digest


def test_the_daily_budget_counts_what_earlier_runs_spent(
    tmp_path: Path, server: OpenMeteoServer
) -> None:
    # 20 weighted calls a day: the first run affords EVER 1940 and EVER 2018 (14.0) only.
    settings = om_settings(tmp_path, server, limits={"per_day": 20.0})
    now = [1_800_000_000.0]
    with pytest.raises(QuotaExhausted, match=r"daily budget reached: 14\.0 of 20"):
        load_weather(settings, RunContext(tmp_path / "run1"), clock=lambda: now[0])
    assert server.requests == 2

    # An hour later, in a new process: the 9.6 calls the third request needs still do not fit
    # beside the 14.0 already spent today, so nothing is sent (a fresh count would send two).
    now[0] += 3_600
    with pytest.raises(QuotaExhausted, match=r"daily budget reached: 14\.0 of 20"):
        load_weather(settings, RunContext(tmp_path / "run2"), clock=lambda: now[0])
    assert server.requests == 2

    now[0] += DAY_S  # the first run's calls have left the 24-hour window
    resumed = load_weather(settings, RunContext(tmp_path / "run3"), clock=lambda: now[0])
    assert resumed.complete and resumed.requests == 2 and server.requests == 4
    with connect(settings.paths.warehouse, read_only=True) as con:
        [(spent,)] = con.execute("SELECT sum(weighted_calls) FROM weather_api_calls").fetchall()
    assert spent == pytest.approx(MINI_WEIGHT) == pytest.approx(server.weighted_calls)


def test_json_and_flatbuffers_carry_the_same_values(
    tmp_path: Path, server: OpenMeteoServer
) -> None:
    settings = om_settings(tmp_path, server)
    request = PlannedRequest(
        date(2019, 5, 1),
        date(2019, 5, 10),
        (Location("EVER", 27.9881, 86.925, 8849.0), Location("KANG", 27.7025, 88.1475, 8586.0)),
    )
    source = OpenMeteoSource(settings.weather, RateLimiter(settings.weather.limits))
    frame = response_frame(source.fetch(request), request)
    params = request.params(settings.weather) | {"format": "json"}
    documents = requests.get(server.url, params=params, timeout=5).json()
    assert [d["location_id"] for d in documents] == [0, 1]
    for document, peakid in zip(documents, ("EVER", "KANG"), strict=True):
        rows = frame.filter(pl.col("peakid") == peakid)
        assert document["daily"]["time"] == [d.isoformat() for d in rows["date"]]
        for name in WEATHER_VARIABLES[:3]:
            assert document["daily"][name] == pytest.approx(rows[name].to_list(), abs=0.01)


def quarantined_weather(settings: Settings) -> list[tuple[str, str, str]]:
    with connect(settings.paths.warehouse, read_only=True) as con:
        return con.execute(
            "SELECT record::JSON->>'peakid', record::JSON->>'date', reason FROM quarantine "
            "WHERE table_name = 'weather_daily'"
        ).fetchall()


def cached_answers(settings: Settings) -> int:
    return len(requests_cache.CachedSession(str(settings.weather.cache_path)).cache.responses)


def test_a_response_with_a_quarantined_row_is_evicted_counted_and_not_quarantined_twice(
    tmp_path: Path, server: OpenMeteoServer
) -> None:
    settings = om_settings(tmp_path, server)
    bad_day = ("EVER", "1940-01-01", "temperature_2m_mean: 9999.0 fails in_range(-90.0, 60.0)")
    server.inject("out-of-range")  # the first request, EVER 1940-01-01..02-10, its first day
    report = load_weather(settings, RunContext(tmp_path / "run1"))
    assert report.complete and report.problem is None  # the stage task does not fail
    assert (report.quarantined, report.quarantined_days, report.missing_days) == (1, 1, 0)
    ever = next(peak for peak in report.peaks if peak.peakid == "EVER")
    assert (ever.quarantined_days, ever.missing_days) == (1, 0)
    assert report.rows == MINI_DAYS - 1
    assert quarantined_weather(settings) == [bad_day]
    assert cached_answers(settings) == 3  # of four answers: the one with the bad row is gone

    # The next run asks the API for the quarantined day again (not the cache) and gets the same
    # bad value: still counted as quarantined, and the quarantine holds the row once.
    server.inject("out-of-range")
    again = load_weather(settings, RunContext(tmp_path / "run2"))
    assert (again.requests, server.requests) == (1, 5)
    assert again.complete and again.quarantined_days == 1
    assert quarantined_weather(settings) == [bad_day]

    # Asked again in full, the three good answers come from the cache and the evicted one from
    # the API, which now has a good value: every day is stored.
    with connect(settings.paths.warehouse) as con:
        con.execute("DELETE FROM weather_daily")
    healed = load_weather(settings, RunContext(tmp_path / "run3"))
    assert (healed.requests, server.requests) == (1, 6)
    assert healed.complete and healed.rows == MINI_DAYS
    assert (healed.quarantined_days, healed.missing_days) == (0, 0)


@pytest.mark.parametrize(
    ("fault", "why"),
    [
        ("nan", "no value at all (every variable NaN on every day)"),
        ("nan-variable", "no value on any day for temperature_2m_mean"),
    ],
)
def test_an_answer_without_values_is_rejected_reported_and_asked_again(
    tmp_path: Path, server: OpenMeteoServer, fault: str, why: str
) -> None:
    settings = om_settings(tmp_path, server)
    server.inject(fault)  # the first request: EVER 1940-01-01..02-10, well-formed but empty
    report = load_weather(settings, RunContext(tmp_path / "run1"))
    assert stored(settings).filter(pl.col("date").dt.year() == 1940).is_empty()
    assert not report.complete and report.rows == MINI_DAYS - 41
    ever = next(peak for peak in report.peaks if peak.peakid == "EVER")
    assert (ever.missing_days, ever.quarantined_days) == (41, 0)
    assert (report.fetched, report.stored, report.quarantined, report.rejected_rows) == (
        MINI_DAYS,
        MINI_DAYS - 41,
        0,
        41,
    )
    written = (tmp_path / "run1" / "weather_report.md").read_text().splitlines()
    [line] = [line for line in written if line.startswith("rejected:")]
    assert line.startswith("rejected: EVER 1940-01-01..1940-02-10 (41 days) of om-")
    assert f": {why}; not stored, asked again next run" in line
    assert quarantined_weather(settings) == []

    # The next run asks the API again for the 41 days (the empty answer left the cache), and
    # the server now answers with values: every day is stored.
    rerun = load_weather(settings, RunContext(tmp_path / "run2"))
    assert (rerun.requests, server.requests) == (1, 5)
    assert rerun.complete and rerun.rows == MINI_DAYS
    assert (rerun.fetched, rerun.stored, rerun.rejected_rows) == (41, 41, 0)


def test_a_location_without_values_is_rejected_alone(
    tmp_path: Path, server: OpenMeteoServer
) -> None:
    # LHOT 2019 (90 days) and EVER 2019 (93) share one request when merging may cost 10% more.
    attempts = tuple(a for a in MINI_ATTEMPTS if a[0] in ("LHOT19101", "EVER19101", "EVER19102"))
    with connect(weather_settings(tmp_path).paths.warehouse) as con:
        load_mini_tables(con, attempts=attempts)
    settings = om_settings(tmp_path, server, max_merge_overhead=0.1)
    server.inject("nan-variable")  # the request's first location, LHOT
    report = load_weather(settings, RunContext(tmp_path / "run1"))
    assert server.requests == 1 and server.log[0]["params"]["latitude"].count(",") == 1
    assert stored(settings)["peakid"].unique().to_list() == ["EVER"]
    assert (report.fetched, report.stored, report.rejected_rows) == (2 * 93, 93, 93)
    [line] = report.rejected
    assert line.startswith("LHOT 2019-02-20..2019-05-23 (93 days) of om-")
    assert line.endswith(
        ": no value on any day for temperature_2m_mean; not stored, asked again next run"
    )

    rerun = load_weather(settings, RunContext(tmp_path / "run2"))  # LHOT's own 90 days
    assert rerun.complete and (rerun.requests, rerun.stored) == (1, 90)
    assert stored(settings)["peakid"].value_counts(sort=True).rows() == [("EVER", 93), ("LHOT", 90)]


# Another process opening the warehouse for writing, without waiting for a lock.
OPEN_FOR_WRITING = "import duckdb, sys; duckdb.connect(sys.argv[1]).close()"


def test_the_warehouse_is_free_while_the_stage_waits_on_the_api(
    tmp_path: Path, server: OpenMeteoServer
) -> None:
    settings = om_settings(tmp_path, server, backoff_max_s=30.0)
    opens_during_waits: list[tuple[int, str]] = []

    def wait_and_let_another_process_write(seconds: float) -> None:
        other = subprocess.run(
            [sys.executable, "-c", OPEN_FOR_WRITING, str(settings.paths.warehouse)],
            capture_output=True,
            text=True,
        )
        opens_during_waits.append((other.returncode, other.stderr.strip()[-200:]))

    server.inject("429")  # a rate-limit answer: the stage waits, then asks again
    report = load_weather(
        settings, RunContext(tmp_path / "run"), sleep=wait_and_let_another_process_write
    )
    assert report.complete and report.rows == MINI_DAYS
    assert opens_during_waits == [(0, "")]
