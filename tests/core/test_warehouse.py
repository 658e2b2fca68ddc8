"""The warehouse file shared by processes: a connection waits for another process's lock, and a
wait that runs out says in one line who holds the file. Real processes on a real DuckDB file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

from deepsummit.core.warehouse import (
    WarehouseLocked,
    connect,
    lock_file,
    lock_holder,
    writer_lock,
)

# Holds a write connection (through deepsummit.core.warehouse.connect, like a stage) after writing
# one row, says so on stdout, then keeps it until stdin closes or `hold_s` has passed.
HOLDER = """
import select, sys
from pathlib import Path
from deepsummit.core.warehouse import connect

path, hold_s = Path(sys.argv[1]), float(sys.argv[2])
with connect(path) as con:
    con.execute("CREATE TABLE IF NOT EXISTS writes (writer VARCHAR)")
    con.execute("INSERT INTO writes (writer) VALUES ('holder')")
    print("holding", flush=True)
    select.select([sys.stdin], [], [], hold_s)
"""


@contextmanager
def holding_process(
    script: Path, holder: str, warehouse: Path, hold_s: float
) -> Iterator[subprocess.Popen[str]]:
    """The code `holder`, written to `script`, run in another process on `warehouse`, once it
    says it is holding; it lets go when stdin closes (or `hold_s` has passed)."""
    script.write_text(holder)
    process = subprocess.Popen(
        [sys.executable, str(script), str(warehouse), str(hold_s)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "holding"
        yield process
    finally:
        assert process.stdin is not None
        process.stdin.close()
        process.wait(timeout=60)


def holding(
    tmp_path: Path, warehouse: Path, hold_s: float
) -> AbstractContextManager[subprocess.Popen[str]]:
    """Another process holding `warehouse` open for writing, for at most `hold_s` seconds."""
    return holding_process(tmp_path / "hold_warehouse.py", HOLDER, warehouse, hold_s)


def test_a_writer_waits_for_another_process_and_writes_after_it(tmp_path: Path) -> None:
    warehouse = tmp_path / "w.duckdb"
    with holding(tmp_path, warehouse, hold_s=1.0) as holder:
        with connect(warehouse, lock_timeout_s=60) as con:
            con.execute("INSERT INTO writes (writer) VALUES ('waiter')")
            rows = con.execute("SELECT writer FROM writes ORDER BY rowid").fetchall()
        assert holder.wait(timeout=60) == 0
    assert rows == [("holder",), ("waiter",)]


def test_a_wait_that_runs_out_names_the_holder_in_one_line(tmp_path: Path) -> None:
    warehouse = tmp_path / "w.duckdb"
    with holding(tmp_path, warehouse, hold_s=60.0) as holder:
        with pytest.raises(WarehouseLocked) as locked, connect(warehouse, lock_timeout_s=0.3):
            pass
        message = str(locked.value)
    assert message == (
        f"{warehouse} is locked by PID {holder.pid} (hold_warehouse.py {warehouse} 60.0) "
        "for 0.3 s; wait for it or stop it"
    )
    # The holder is gone and nothing was left half-written.
    with connect(warehouse, read_only=True, lock_timeout_s=0) as con:
        assert con.execute("SELECT writer FROM writes").fetchall() == [("holder",)]


def test_a_readers_wait_is_bounded_too(tmp_path: Path) -> None:
    warehouse = tmp_path / "w.duckdb"
    with (
        holding(tmp_path, warehouse, hold_s=60.0),
        pytest.raises(WarehouseLocked, match="is locked by PID"),
        connect(warehouse, read_only=True, lock_timeout_s=0.2),
    ):
        pass


def test_the_holder_is_named_by_its_command_line() -> None:
    code = "import time; print('started', flush=True); time.sleep(30)"
    running = subprocess.Popen([sys.executable, "-c", code, "--flag"], stdout=subprocess.PIPE)
    try:
        running.stdout.readline()  # it runs the code: its command line is its own, not ours
        # An interpreter running code, not a script, keeps its own name.
        named = lock_holder(running.pid, sys.executable)
    finally:
        running.kill()
        running.wait()
    assert named == f"{Path(sys.executable).name} -c {code} --flag"
    # A process that has gone is named by the program DuckDB reported.
    assert lock_holder(running.pid, "/usr/local/bin/deepsummit") == "deepsummit"


# Holds the writers' lock (deepsummit.core.warehouse.writer_lock, as a stage does), says so on
# stdout, then keeps it until stdin closes or `hold_s` has passed.
LOCK_HOLDER = """
import select, sys
from pathlib import Path
from deepsummit.core.warehouse import writer_lock

with writer_lock(Path(sys.argv[1]), "the holder stage", print):
    print("holding", flush=True)
    select.select([sys.stdin], [], [], float(sys.argv[2]))
"""


def holding_writer_lock(
    tmp_path: Path, warehouse: Path, hold_s: float
) -> AbstractContextManager[subprocess.Popen[str]]:
    """Another process holding `warehouse`'s writers' lock, for at most `hold_s` seconds."""
    return holding_process(tmp_path / "hold_writer_lock.py", LOCK_HOLDER, warehouse, hold_s)


def test_a_writer_waits_for_the_lock_another_process_holds_saying_so_once(
    tmp_path: Path,
) -> None:
    warehouse = tmp_path / "w.duckdb"
    said: list[str] = []
    with holding_writer_lock(tmp_path, warehouse, hold_s=1.5) as holder:
        started = time.monotonic()
        with writer_lock(warehouse, "the waiter", said.append):
            waited_s = time.monotonic() - started  # the holder let go after its 1.5 s
    assert waited_s >= 1.0
    assert said == [
        f"waiting for {lock_file(warehouse)}: held by the holder stage (PID {holder.pid}, since "
        + said[0].split(", since ", 1)[1]
    ]
    assert lock_file(warehouse).read_text() == ""  # a writer that has left is named nowhere


def test_a_killed_writer_leaves_the_lock_free(tmp_path: Path) -> None:
    warehouse = tmp_path / "w.duckdb"
    said: list[str] = []
    with holding_writer_lock(tmp_path, warehouse, hold_s=60.0) as holder:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=60)
        with writer_lock(warehouse, "the next writer", said.append):
            assert "the next writer" in lock_file(warehouse).read_text()
    assert said == []
