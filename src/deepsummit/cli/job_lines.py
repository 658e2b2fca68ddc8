"""The lines `deepsummit main-job` prints while its run goes on, as plain functions of what the
Prefect server said (`deepsummit/cli/job_watch.py` asks it): one per stage as it ends, the
training's progress, and what the run waits for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from deepsummit.flows.stage_ends import StageEnd

STAGE_WIDTH = 9  # the longest stage name of summit/train ("features") and a space

# A progress artifact's description (deepsummit/flows/runner.py, StageProgress):
# "train: 12 of 90 (training 2 of 3 (before the test split), seed 42 (1 of 1), epoch 3 of 3)".
_PROGRESS = re.compile(r"^[\w-]+: (?P<done>[\d,.]+) of (?P<total>[\d,.]+) \((?P<message>.*)\)$")

# What a flow run waits for, by its state's name (Prefect 3's names).
WAITING = {
    "Scheduled": "scheduled, waiting for a worker of its pool to take it",
    "Late": "late: no worker of its pool has taken it yet",
    "AwaitingConcurrencySlot": "queued behind another run of its deployment (one at a time)",
    "AwaitingRetry": "waiting to be retried",
    "Submitting": "taken by a worker, submitting",
    "Pending": "taken by a worker, starting",
    "Running": "running",
    "Retrying": "running again",
    "Paused": "paused",
    "Suspended": "suspended",
    "Cancelling": "being cancelled",
}


def duration(seconds: float) -> str:
    """ "45 s", "3 min 05 s", "1 h 02 min": whole seconds, minutes past 10 min."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def stage_line(end: StageEnd) -> str:
    """A stage as it ended: "ingest      12 s  88,123 rows ingested, …"; one served from the
    cache says so first ("… 0 s  cached: 88,123 rows …": what the run that computed it made)."""
    made = ("cached: " if end.state == "Cached" else "") + end.made
    return f"{end.stage:<{STAGE_WIDTH}}{duration(end.seconds):>11}  {made}".rstrip()


@dataclass(frozen=True)
class Progress:
    """A stage's progress artifact as the server has it."""

    percent: float  # 0..100
    message: str  # e.g. "training 2 of 3 (before the test split), seed 42 (1 of 1), epoch 3 of 3"


def parse_progress(percent: float, description: str) -> Progress:
    """The artifact's percentage and what its description says inside the brackets (the whole
    description where it has none)."""
    found = _PROGRESS.match(description.strip())
    return Progress(float(percent), found["message"] if found else description.strip())


def time_left(percent: float, elapsed_s: float) -> float | None:
    """Seconds left at the pace so far: `elapsed_s` for `percent`; None before any progress."""
    if percent <= 0 or elapsed_s <= 0:
        return None
    return max(0.0, elapsed_s * (100.0 - percent) / percent)


def progress_line(
    stage: str, progress: Progress, left_s: float | None, elapsed_s: float | None = None
) -> str:
    """E.g. "  train: training 2 of 3 (before the test split), seed 42 (1 of 1), epoch 3 of 3;
    44%, about 2 min 10 s left"; at 100%, what is left has no estimate: "…; 100%, finishing
    (running for 5 min 02 s)"."""
    if progress.percent >= 100:
        since = "" if elapsed_s is None else f" (running for {duration(elapsed_s)})"
        return f"  {stage}: {progress.message}; 100%, finishing{since}"
    left = "" if left_s is None else f", about {duration(left_s)} left"
    return f"  {stage}: {progress.message}; {progress.percent:.0f}%{left}"


def running_line(stage: str, elapsed_s: float) -> str:
    """A stage that has said nothing yet: "  weather: running for 40 s"."""
    return f"  {stage}: running for {duration(elapsed_s)}"


def run_state_line(what: str, state: str, elapsed_s: float | None = None) -> str:
    """A flow run's state in words: "  summit/train: queued behind another run … (1 min 05 s)"."""
    words = WAITING.get(state, state)
    since = "" if elapsed_s is None else f" ({duration(elapsed_s)})"
    return f"  {what}: {words}{since}"


def reason(state: str, message: str | None) -> str:
    """Why a run ended as it did, in one line: its state and the first line of its message."""
    first = (message or "").strip().splitlines()
    text = first[0] if first else "no message"
    return f"{state}: {text[:300]}"
