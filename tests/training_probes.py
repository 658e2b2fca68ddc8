"""Flows that stand in for a training flow run on a worker, deployed by entrypoint
`tests/training_probes.py:...` (so only the standard library and Prefect here): one that never
ends, one whose process is killed the first time it runs, and one that leaves a mark."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from prefect import flow


@flow(name="probe-hang", persist_result=False)
def hang(marker: str) -> None:
    """A training that never ends (a deadlock, a stalled data loader)."""
    Path(marker).write_text(str(os.getpid()))
    time.sleep(24 * 3600)


@flow(name="probe-killed-once", persist_result=False)
def killed_once(marker: str) -> str:
    """Killed with SIGKILL, its worker alive, the first time; completes once run again."""
    path = Path(marker)
    if not path.exists():
        path.write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    return "ran again"


@flow(name="probe-marks", persist_result=False)
def marks(marker: str) -> None:
    """The payload of a run: leaves the names of its environment's variables in `marker`."""
    Path(marker).write_text("\n".join(sorted(os.environ)))
