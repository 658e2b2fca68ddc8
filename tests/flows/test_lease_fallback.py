"""A stage command whose Prefect server is down runs its flow on a temporary server, which
shares no slot with anyone: it still waits for the warehouse's flock that every writer holds,
says so in one line, and never writes while another writer (a deployment run's stage) is in.
Real processes: a writer holding the lock, and `deepsummit ingest` as a person runs it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from flows_fixtures import as_environment, isolated_paths, write_bundle_slice
from services_fixtures import free_port, output_lines

from deepsummit.core.sections import PROJECT_ROOT
from deepsummit.core.warehouse import lock_file

# Another writer: holds the writers' lock as a stage does, says so, keeps it until stdin closes,
# then says whether anyone wrote the warehouse meanwhile (it did not exist when it took the lock).
WRITER = """
import sys
from pathlib import Path
from deepsummit.core.warehouse import writer_lock

warehouse = Path(sys.argv[1])
with writer_lock(warehouse, "the ingest stage of a deployment run", print):
    print("holding", flush=True)
    sys.stdin.read()
    print("interleaved" if warehouse.exists() else "alone", flush=True)
"""
STARTUP_TIMEOUT_S = 300  # the command's imports and its temporary Prefect server, on a busy machine


def test_a_command_without_its_server_waits_for_the_writer_in_and_says_so(
    tmp_path: Path,
) -> None:
    overrides = isolated_paths(tmp_path)
    overrides["paths"]["data_dir"] = str(write_bundle_slice(tmp_path / "data", ("KANG",)))
    overrides["services"]["prefect_port"] = free_port()  # nothing answers there: the server is down
    warehouse = Path(overrides["paths"]["warehouse"])
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    writer = subprocess.Popen(
        [sys.executable, str(script), str(warehouse)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert writer.stdout is not None and writer.stdin is not None
    assert writer.stdout.readline().strip() == "holding"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "DEEPSUMMIT_"))}
    command = subprocess.Popen(
        [sys.executable, "-m", "deepsummit.cli.app", "ingest", "--profile", "tiny"],
        env={**env, **as_environment(overrides)},
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    waiting = f"waiting for {lock_file(warehouse)}: "
    try:
        output = output_lines(command)
        seen: list[str] = []
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not any(waiting in line for line in seen):
            line = output.get(timeout=max(0.0, deadline - time.monotonic()))
            assert line is not None, "the command ended without waiting:\n" + "\n".join(seen)
            seen.append(line)
        time.sleep(3)  # it keeps waiting while the writer is in
        assert command.poll() is None
        writer.stdin.close()
        assert writer.stdout.readline().strip() == "alone"
        assert writer.wait(timeout=60) == 0
        assert command.wait(timeout=STARTUP_TIMEOUT_S) == 0, "\n".join(seen)
    finally:
        if command.poll() is None:
            command.kill()
        if writer.poll() is None:
            writer.kill()
    while (line := output.get(timeout=60)) is not None:
        seen.append(line)
    (said,) = [line for line in seen if waiting in line]  # one line, once
    assert said.endswith(
        f"{waiting}held by the ingest stage of a deployment run (PID {writer.pid}, since "
        + said.split(", since ", 1)[1]
    )
    assert warehouse.exists()  # the command wrote it, once the writer had left
