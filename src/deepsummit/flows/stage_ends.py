"""A stage's end in one line: its name, whether it ran or was served from the cache, how long
it took and what it made. The `summit` flow logs it to its flow run when each stage ends
(`deepsummit/flows/summit.py`), where the run's logs keep it: `deepsummit main-job` reads those
lines back from the Prefect server (`deepsummit/cli/job_watch.py`), wherever the run ran.

Plain Python, no Prefect: the command imports it at every start.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# What starts every such log line.
MARKER = "stage ended:"
_LINE = re.compile(
    rf"^{re.escape(MARKER)} (?P<stage>[\w-]+) \((?P<state>\w+), (?P<seconds>\d+(?:\.\d+)?) s\)"
    r"(?:: (?P<made>.*))?$",
    re.DOTALL,
)


def progress_key(stage: str) -> str:
    """The key of `stage`'s progress artifact (deepsummit/flows/runner.py, StageProgress)."""
    return f"deepsummit-{stage}-progress"


@dataclass(frozen=True)
class StageEnd:
    stage: str
    state: str  # Completed, or Cached: served from the cache
    seconds: float
    made: str  # what it made, in words; "" when there is nothing to say

    def message(self) -> str:
        """The log line, e.g. "stage ended: ingest (Completed, 12.3 s): 88,123 rows …"."""
        made = f": {self.made}" if self.made else ""
        return f"{MARKER} {self.stage} ({self.state}, {self.seconds:.1f} s){made}"

    @classmethod
    def parse(cls, message: str) -> StageEnd | None:
        """The stage end a log line states (`message()`'s), or None for any other line."""
        found = _LINE.match(message.strip())
        if found is None:
            return None
        return cls(found["stage"], found["state"], float(found["seconds"]), found["made"] or "")


def _ingest(report: Any) -> str:
    clean = sum(source.clean for source in report.sources)
    quarantined = sum(source.quarantined for source in report.sources)
    expectations = "passed" if report.expectations_passed else "NOT all passed"
    return f"{clean:,} rows ingested, {quarantined:,} quarantined; expectations {expectations}"


def _weather(report: Any) -> str:
    return (
        f"{report.rows:,} weather_daily rows (source {report.source}), {report.stored:,} "
        f"written and {report.quarantined:,} quarantined by this load"
    )


def _features(report: Any) -> str:
    splits = ", ".join(f"{name} {figures.attempts:,}" for name, figures in report.splits.items())
    return f"{report.rows:,} feature rows ({splits}), snapshot {report.snapshot_digest[:12]}"


def _train(report: Any) -> str:
    role = "champion" if report.champion else "challenger"
    return (
        f"model {report.model_name} v{report.model_version} ({role}, {report.served}), "
        f"test AUC {report.test_auc:.3f}"  # the served model's
    )


def _drift(check: Any) -> str:
    if check.report is None:
        return f"input drift not compared ({check.note})"
    drifted, compared = check.report.drifted, len(check.report.rows)
    if not drifted:
        return f"no input drift ({compared} inputs compared)"
    named = ", ".join(drifted[:3]) + (", …" if len(drifted) > 3 else "")
    return f"input drift in {len(drifted)} of {compared} inputs: {named}"


MADE = {
    "ingest": _ingest,
    "weather": _weather,
    "features": _features,
    "train": _train,
    "drift": _drift,
}


def made(stage: str, report: Any) -> str:
    """What `stage` made, from its report, in a few words ("" for a stage not listed, or a
    report that does not have what is asked of it: the line never fails the run)."""
    describe = MADE.get(stage)
    if describe is None:
        return ""
    try:
        return describe(report)
    except (AttributeError, IndexError, KeyError, TypeError, ValueError):
        return ""
