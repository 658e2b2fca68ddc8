"""The tests' local Open-Meteo server (tests/openmeteo_server.py), run as a program for a bench:
benches talk to it over HTTP as the pipeline does, and never import test code."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SERVER = Path(__file__).resolve().parents[1] / "tests" / "openmeteo_server.py"


@dataclass(frozen=True)
class LocalOpenMeteo:
    archive_url: str
    forecast_url: str

    def counts(self) -> tuple[int, float]:
        """(requests, weighted calls) the server has answered so far (its own count)."""
        stats_url = self.archive_url.replace("/v1/archive", "/stats")
        with urllib.request.urlopen(stats_url, timeout=10) as response:
            stats = json.load(response)
        return stats["requests"], stats["weighted_calls"]


@contextlib.contextmanager
def local_open_meteo() -> Iterator[LocalOpenMeteo]:
    """The server on a free port, stopped on exit."""
    with subprocess.Popen(
        [sys.executable, str(SERVER), "--port", "0"], stdout=subprocess.PIPE, text=True
    ) as process:
        assert process.stdout is not None
        try:
            archive = process.stdout.readline().split()[-1]
            forecast = process.stdout.readline().split()[-1]
            yield LocalOpenMeteo(archive, forecast)
        finally:
            process.terminate()
