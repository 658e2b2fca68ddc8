"""A stage that holds the warehouse slot when the Prefect server goes away, for longer than the
slot's lease can be renewed: it finishes what it began (Prefect would interrupt it wherever it
was), the server frees the slot once back, and the next run gets it, then waits at the
warehouse's flock until the stage is done: the lease lost, still one writer at a time.

Real processes: the local Prefect server as `deepsummit up` starts it, stopped and restarted;
`deepsummit ingest` as a person runs it, reading its members file from a local HTTP server that
hands the file over only when the test says so (the stage is then provably mid-way). The outage
outlasts the lease without a minute's wait: while the server is down, the leases it keeps on disk
are dated as a minute later finds them, run out; the client's own renewal fails on its clock
(45 s after it took the slot), as it would.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from flows_fixtures import as_environment, isolated_paths, write_bundle_slice
from services_fixtures import STARTUP_TIMEOUT_S, free_port, output_lines

from deepsummit.core.config import load_settings
from deepsummit.core.sections import PROJECT_ROOT
from deepsummit.core.warehouse import connect, lock_file
from deepsummit.services import supervisor
from deepsummit.services.local import PREFECT_SERVER, ensure_prefect_auth, prefect_home
from deepsummit.services.processes import stop_process

pytestmark = pytest.mark.long

LEASE_S = 60  # the least Prefect's server takes; renewed after 45 s
# Prefect's line when a renewal has failed three times (prefect/concurrency/_leases.py).
RENEWAL_FAILED = "Concurrency lease renewal failed"
SLICE_MEMBERS = 1_385  # the members rows of the KANG slice


class HeldFile:
    """A file served over HTTP a byte at a time (so the reader's socket never times out) until
    `release` is set, then the rest at once; `asked` is set at the first request."""

    def __init__(self, content: bytes) -> None:
        self.asked = threading.Event()
        self.release = threading.Event()
        held = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                held.asked.set()
                self.send_response(200)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                sent = 0
                while not held.release.wait(0.5) and sent < len(content) - 1:
                    self.wfile.write(content[sent : sent + 1])
                    self.wfile.flush()
                    sent += 1
                self.wfile.write(content[sent:])

            def log_message(self, *args: Any) -> None:  # keep the test output quiet
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http.daemon_threads = True
        threading.Thread(target=self._http.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}/members.csv.gz"

    def close(self) -> None:
        self.release.set()
        self._http.shutdown()
        self._http.server_close()


def _run_out_leases(settings: Any) -> int:
    """Every slot lease the stopped server keeps on disk (Prefect's filesystem lease storage: a
    file per lease and an index of expirations) made to have expired now, as the outage had
    outlasted it; how many there were."""
    storage = prefect_home(settings) / "concurrency_leases"
    now = datetime.now(UTC).isoformat()
    leases = [path for path in storage.glob("*.json") if path.name != "expirations.json"]
    for path in leases:
        path.write_text(json.dumps(json.loads(path.read_text()) | {"expiration": now}))
    index = storage / "expirations.json"
    index.write_text(json.dumps(dict.fromkeys(json.loads(index.read_text()), now)))
    return len(leases)


def _start_prefect_server(settings: Any) -> None:
    """The local Prefect server exactly as `deepsummit up` starts it (its database and lease
    files kept under the settings' run folder across restarts)."""
    supervisor.start_service(settings, PREFECT_SERVER, STARTUP_TIMEOUT_S)


@contextmanager
def _command_output(process: subprocess.Popen[str]) -> Iterator[queue.Queue[str | None]]:
    """The process's output line by line as it comes (None once closed); the process killed
    if the block leaves it running."""
    try:
        yield output_lines(process)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _wait_for_line(lines: queue.Queue[str | None], text: str, seen: list[str], s: float) -> None:
    deadline = time.monotonic() + s
    while not any(text in line for line in seen):
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"no {text!r} in {s:g} s:\n" + "\n".join(seen)) from None
        assert line is not None, f"the command ended before {text!r}:\n" + "\n".join(seen)
        seen.append(line)


def test_a_stage_that_loses_its_slot_lease_finishes_alone_and_the_next_run_gets_the_slot(
    tmp_path: Path,
) -> None:
    overrides = isolated_paths(tmp_path)
    data = write_bundle_slice(tmp_path / "data", ("KANG",))
    held = HeldFile((data / "himalayan/members.csv.gz").read_bytes())
    overrides["paths"]["data_dir"] = str(data)
    overrides["services"] |= {"prefect_port": free_port(), "slot_lease_s": LEASE_S}
    overrides["sources"] = {"members": held.url}
    settings = load_settings("tiny", overrides)
    settings.services.run_dir.mkdir(parents=True, exist_ok=True)
    ensure_prefect_auth(settings)
    _start_prefect_server(settings)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "DEEPSUMMIT_"))}

    def ingest() -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "deepsummit.cli.app", "ingest", "--profile", "tiny"],
            env={**env, **as_environment(overrides)},
            cwd=PROJECT_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    first_seen: list[str] = []
    next_seen: list[str] = []
    try:
        first = ingest()
        with _command_output(first) as first_lines:
            assert held.asked.wait(STARTUP_TIMEOUT_S), "the stage never asked for its file"
            # The stage is reading its sources, slot held: the server goes away until the
            # lease has run out, and answers the next renewal that the lease is gone.
            stop_process(settings, PREFECT_SERVER)
            assert _run_out_leases(settings) == 1  # the stage's, kept on disk
            _start_prefect_server(settings)
            # The renewal due 45 s after the slot was taken fails for good.
            _wait_for_line(first_lines, RENEWAL_FAILED, first_seen, 3 * LEASE_S)
            time.sleep(3)  # where Prefect interrupted the stage, it would have done so by now
            assert first.poll() is None, "\n".join(first_seen)
            # The server freed the slot with the lease: the next run takes it while the stage
            # is still in, and waits at the warehouse's flock instead of writing beside it.
            following = ingest()
            with _command_output(following) as next_lines:
                waiting = f"waiting for {lock_file(settings.paths.warehouse)}: held by the ingest"
                _wait_for_line(next_lines, waiting, next_seen, STARTUP_TIMEOUT_S)
                assert any("holding the deepsummit-warehouse slot" in x for x in next_seen)
                assert first.poll() is None, "\n".join(first_seen)
                held.release.set()
                assert first.wait(timeout=STARTUP_TIMEOUT_S) == 0, "\n".join(first_seen)
                assert following.wait(timeout=STARTUP_TIMEOUT_S) == 0, "\n".join(next_seen)
    finally:
        held.close()
        stop_process(settings, PREFECT_SERVER)
    with connect(settings.paths.warehouse, read_only=True) as con:
        (members,) = con.execute("SELECT count(*) FROM members").fetchone()
    assert members == SLICE_MEMBERS  # a whole generation, committed
