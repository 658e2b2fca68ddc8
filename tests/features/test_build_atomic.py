"""A features build killed at any statement, or stopped by its checks, leaves the warehouse's
features tables of one build, all of the previous one or all of the new one; the next build
completes."""

from __future__ import annotations

import itertools
import multiprocessing
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import features_tables
import pytest
from features_tables import settings_for

from deepsummit.contracts.snapshot import PREPROCESSING_FILE, SPLITS, load_features
from deepsummit.core.context import RunContext
from deepsummit.core.errors import PipelineError
from deepsummit.core.warehouse import frame_digest
from deepsummit.features import stage
from deepsummit.features.stage import build_features
from deepsummit.features.tabular import HISTORY_TABLES

pytest_plugins = ["features_fixtures"]

BUILD_TABLES = (
    "attempt_candidates",
    "weather_windows",
    "attempts",
    "attempt_exclusions",
    *HISTORY_TABLES,
    "features",
)


class KilledAtStatement:
    """The stage's warehouse connection, whose process SIGKILLs itself before statement number
    `kill_at` (each statement of a multi-statement file counts, and the commit)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, kill_at: int) -> None:
        self._con = con
        self._kill_at = kill_at
        self._statements = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self._con, name)

    def _next(self) -> None:
        self._statements += 1
        if self._statements == self._kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    def execute(self, text: str, params: dict | None = None) -> KilledAtStatement:
        for statement in duckdb.extract_statements(text):
            self._next()
            self._con.execute(statement, {k: params[k] for k in statement.named_parameters})
        return self

    def sql(self, text: str, params: dict | None = None) -> duckdb.DuckDBPyRelation:
        self._next()
        return self._con.sql(text, params=params)

    def commit(self) -> duckdb.DuckDBPyConnection:
        self._next()
        return self._con.commit()


def killed_build(tmp: Path, warehouse: Path, kill_at: int) -> None:
    """The features stage, in a process of its own, through a connection killing that process
    before statement number `kill_at`; past the last statement it builds to the end."""
    connect = stage.connect

    @contextmanager
    def killing_connect(*args: object, **kwargs: object) -> Iterator[KilledAtStatement]:
        with connect(*args, **kwargs) as con:
            yield KilledAtStatement(con, kill_at)

    stage.connect = killing_connect
    stage.build_features(settings_for(tmp, warehouse), RunContext(tmp / "run"))


# Each killed build is a child of one forkserver that imported the stage once (a fresh
# interpreter per build spent most of its second importing it).
BUILDS = multiprocessing.get_context("forkserver")
BUILDS.set_forkserver_preload([features_tables.__name__, stage.__name__])

# The next build's records: every table of the build changes (routes and outcomes of the recent
# years, a push day a day later, dates lost, climber ids, agencies, peak heights).
CHANGE_RECORDS = """
UPDATE expeditions SET route1 = 'Atlantis', smtmembers = totmembers - smtmembers
WHERE year > 2020;
UPDATE expeditions SET smtdate = smtdate + 1 WHERE year = 2019;
UPDATE expeditions SET smtdate = NULL WHERE year = 2018 AND season = 'Autumn';
UPDATE members SET climber_id = member_id WHERE year BETWEEN 2015 AND 2017;
UPDATE expedition_details SET trekking_agency = 'Atlantis Treks' WHERE year = 2015;
UPDATE peaks SET heightm = heightm - 1;
"""


def table_digests(warehouse: Path) -> dict[str, str]:
    with duckdb.connect(str(warehouse), read_only=True) as con:
        return {name: frame_digest(con.table(name).pl()) for name in BUILD_TABLES}


def build_killed_at(statement: int, tmp_path: Path, warehouse: Path) -> int:
    """The exit status of a build process killed before its statement number `statement`."""
    build = BUILDS.Process(target=killed_build, args=(tmp_path, warehouse, statement))
    build.start()
    build.join(timeout=300)
    if build.is_alive():  # never left running past the test, as subprocess.run's timeout ensured
        build.kill()
        build.join()
    assert build.exitcode in (0, -signal.SIGKILL), f"the build exited {build.exitcode}"
    return build.exitcode


def test_a_build_killed_at_any_statement_leaves_one_generation(
    two_peaks: Path, tmp_path: Path
) -> None:
    settings = settings_for(tmp_path, two_peaks)
    previous = build_features(settings, RunContext(tmp_path / "run"))
    old = table_digests(two_peaks)
    with duckdb.connect(str(two_peaks)) as con:
        con.execute(CHANGE_RECORDS)

    after_kill: dict[int, dict[str, str]] = {}
    for statement in itertools.count(1):
        if build_killed_at(statement, tmp_path, two_peaks) == 0:
            break  # past the last statement: this build ran to its end
        after_kill[statement] = table_digests(two_peaks)
        arrays, _ = load_features(previous.directory)  # the previous snapshot is still whole
        assert set(arrays) == set(SPLITS)
    new = table_digests(two_peaks)

    assert [name for name in BUILD_TABLES if old[name] == new[name]] == []
    mixed = {
        statement: [name for name in BUILD_TABLES if digests[name] != old[name]]
        for statement, digests in after_kill.items()
        if digests not in (old, new)
    }
    assert mixed == {}, (
        "killed before statement k, these tables were no longer the previous build's"
    )
    assert len(after_kill) >= 21  # each of the build's statements (20 today) and its commit
    snapshots = list((tmp_path / "features").glob(f"*/{PREPROCESSING_FILE}"))
    assert len(snapshots) == 2  # the previous snapshot and the completed build's


def test_a_build_its_checks_stop_leaves_the_previous_tables(
    two_peaks: Path, tmp_path: Path
) -> None:
    settings = settings_for(tmp_path, two_peaks)
    build_features(settings, RunContext(tmp_path / "run"))
    old = table_digests(two_peaks)
    with duckdb.connect(str(two_peaks)) as con:
        con.execute("UPDATE peaks SET heightm = 9999 WHERE peakid = 'LHOT'")  # out of range
    with pytest.raises(PipelineError, match=r"schema.*heightm"):
        build_features(settings, RunContext(tmp_path / "run"))
    assert table_digests(two_peaks) == old
