"""The local services (`deepsummit up`) for tests: on free ports, every file under one folder.

Used by tests/flows/test_services.py and tests/flows/test_alerts.py; never the default ports,
so a `make train` left running beside the tests changes nothing.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flows_fixtures import as_environment, isolated_paths

from deepsummit.core.config import PROJECT_ROOT, Settings, deep_merge, load_settings
from deepsummit.services import supervisor as services


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class RunningServices:
    settings: Settings
    overrides: dict[str, Any]  # what made `settings`, for `deepsummit` in a subprocess
    up_lines: list[str]  # what the first `up` reported


@contextmanager
def running_services(
    root: Path, overrides: dict[str, Any] | None = None
) -> Iterator[RunningServices]:
    """`services.up` on free ports under `root` (tiny profile), `services.down` afterwards."""
    ports = {"prefect_port": free_port(), "mlflow_port": free_port()}
    merged = deep_merge(deep_merge(isolated_paths(root), {"services": ports}), overrides or {})
    settings = load_settings("tiny", merged)
    try:
        yield RunningServices(settings, merged, services.up(settings))
    finally:
        services.down(settings)


def deepsummit(overrides: dict[str, Any], *args: str) -> subprocess.CompletedProcess:
    """The `deepsummit` command with these settings (as DEEPSUMMIT_* variables), as a user runs
    it: nothing of this test process's Prefect settings leaks in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "DEEPSUMMIT_"))}
    return subprocess.run(
        [sys.executable, "-m", "deepsummit.cli.app", *args],
        env={**env, **as_environment(overrides)},
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
