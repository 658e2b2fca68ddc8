"""`deepsummit main-job`'s run: summit/train started through the Prefect server's REST API and
followed by asking it, every POLL_S, about the flow run, its child runs (the train stage's own
deployment, whichever worker took it), the lines the flow logs as each stage ends
(`deepsummit/flows/stage_ends.py`) and the stages' progress artifacts. What it prints is
`deepsummit/cli/job_lines.py`'s: one line per stage as it ends, and while the run goes on a line
at least every QUIET_S. Every loop ends by the deadline the caller gives.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from deepsummit.cli.exit_codes import ExitCode
from deepsummit.cli.job_lines import (
    Progress,
    parse_progress,
    progress_line,
    run_state_line,
    running_line,
    stage_line,
    time_left,
)
from deepsummit.flows.stage_ends import StageEnd, progress_key
from deepsummit.services.prefect_api import PrefectApi

POLL_S = 2.0  # how often the server is asked
QUIET_S = 20.0  # the longest the command stays silent while the run goes on
PROGRESS_S = 10.0  # a stage's changed progress is shown at most this often
API_DOWN_S = 60.0  # a server that answers nothing this long ends the watch
LOG_LATE_S = 60.0  # how much later than its timestamp a log line may reach the server
LOG_PAGES = 10  # pages of 200 logs read at most in one round
LOG_GRACE_S = 15.0  # after the run ends: how long its last stage lines may take to arrive
FINAL_TYPES = frozenset({"COMPLETED", "FAILED", "CRASHED", "CANCELLED"})
WORKER_NAME_LABEL = "prefect.worker.name"  # as deepsummit/flows/training.py reads it
# What the API may raise for a server that is down, busy or answering nonsense.
API_ERRORS = (OSError, ValueError, http.client.HTTPException)


class WatchFailed(Exception):
    """The watch cannot go on: one line, and the command's exit code."""

    def __init__(self, message: str, code: ExitCode = ExitCode.FAILED) -> None:
        super().__init__(message)
        self.code = code


def parameters(params: list[str]) -> dict[str, Any]:
    """`KEY=VALUE` options as flow parameters: each value JSON where it parses, a string
    otherwise (as `prefect deployment run --param` reads them)."""
    parsed: dict[str, Any] = {}
    for param in params:
        key, sep, value = param.partition("=")
        if not sep or not key.strip():
            raise WatchFailed(f"--param {param!r}: not KEY=VALUE", ExitCode.BAD_INPUT)
        try:
            parsed[key.strip()] = json.loads(value)
        except ValueError:
            parsed[key.strip()] = value
    return parsed


def start_run(api: PrefectApi, deployment: str, params: dict[str, Any]) -> dict[str, Any]:
    """A new flow run of `deployment` (`flow/deployment`), scheduled now; as the server made it."""
    try:
        found = api.get(f"/deployments/name/{deployment}")
        return api.post(
            f"/deployments/{found['id']}/create_flow_run",
            {"parameters": params, "idempotency_key": str(uuid.uuid4())},
        )
    except urllib.error.HTTPError as error:
        detail = error.read().decode(errors="replace").strip()[:300]
        if error.code == 404:
            raise WatchFailed(
                f"no deployment {deployment} on {api.url}: `deepsummit up` applies prefect.yaml",
                ExitCode.SERVICE_UNAVAILABLE,
            ) from None
        code = ExitCode.BAD_INPUT if error.code in (409, 422) else ExitCode.FAILED
        raise WatchFailed(f"{deployment} refused the run ({error.code}): {detail}", code) from None
    except API_ERRORS as error:
        raise WatchFailed(
            f"could not start {deployment}: {error}", ExitCode.SERVICE_UNAVAILABLE
        ) from None


@dataclass
class Watch:
    """One flow run of the chain `stages`, followed until it ends; `echo` prints a line."""

    api: PrefectApi
    run: dict[str, Any]
    stages: tuple[str, ...]
    echo: Callable[[str], None]
    clock: Callable[[], float] = time.monotonic
    what: str = "summit/train"
    ended: dict[str, StageEnd] = field(default_factory=dict)
    states: dict[str, str] = field(default_factory=dict)  # flow run id → state name shown
    children: list[dict[str, Any]] = field(default_factory=list)
    progress: tuple[Progress, float] | None = None  # the newest seen, and when first seen
    progress_shown: Progress | None = None
    stage_since: float = 0.0  # when the running stage was first seen running
    state_since: float = 0.0  # when the run's present state was first seen
    last_line: float = 0.0
    unanswered_since: float | None = None
    logs_read: set[str] = field(default_factory=set)  # ids of the run's logs read
    newest_log: datetime | None = None  # the newest timestamp among them

    def say(self, line: str) -> None:
        self.echo(line)
        self.last_line = self.clock()

    @property
    def running_stage(self) -> str | None:
        return next((stage for stage in self.stages if stage not in self.ended), None)

    def follow(self, deadline: float, sleep: Callable[[float], None] = time.sleep) -> dict:
        """Ask until the run ends (its last state), or raise WatchFailed at `deadline`."""
        self.last_line = self.stage_since = self.state_since = self.clock()
        while True:
            try:
                self.poll()
            except API_ERRORS as error:
                self.unanswered(error)
            else:
                self.unanswered_since = None
                if self.run["state_type"] in FINAL_TYPES:
                    self.last_stage_lines(min(deadline, self.clock() + LOG_GRACE_S), sleep)
                    return self.run
            if self.clock() >= deadline:
                state = self.run.get("state_name") or "not started"
                raise WatchFailed(
                    f"gave up watching: flow run {self.run['name']} is {state} after the "
                    "--timeout-s given; it goes on without this command"
                )
            sleep(POLL_S)

    def poll(self) -> None:
        """One round of questions, and the lines their answers call for."""
        self.run = self.api.get(f"/flow_runs/{self.run['id']}")
        self.show_state(self.run, self.what)
        self.read_stage_ends()
        if self.run["state_type"] in FINAL_TYPES:
            return
        stage = self.running_stage
        if self.run["state_name"] != "Running" or stage is None:
            since = self.clock() - self.state_since
            self.quiet_line(run_state_line(self.what, self.run["state_name"], since))
            return
        if stage == "train":
            self.read_children()
        self.read_progress(stage)
        self.stage_line_or_progress(stage)

    def show_state(self, run: dict[str, Any], what: str) -> None:
        """A line when a flow run's state changes (the end of the chain's run is the caller's)."""
        state = run.get("state_name") or "Scheduled"
        if self.states.get(run["id"]) == state:
            return
        if run["id"] == self.run["id"] and run["state_type"] in FINAL_TYPES:
            return
        self.states[run["id"]] = state
        worker = (run.get("labels") or {}).get(WORKER_NAME_LABEL)
        where = f" on worker {worker}" if state == "Running" and worker else ""
        self.say(run_state_line(what, state) + where)
        if run["id"] == self.run["id"]:
            self.state_since = self.stage_since = self.clock()

    def read_stage_ends(self) -> None:
        """The stage lines the run has logged since the last round, printed in chain order."""
        found = {
            end.stage: end for log in self.new_logs() if (end := StageEnd.parse(log["message"]))
        }
        for stage in [*self.stages, *sorted(set(found) - set(self.stages))]:
            if stage in found and stage not in self.ended:
                self.ended[stage] = found[stage]
                self.say(stage_line(found[stage]))
                self.stage_since = self.clock()
                self.progress = self.progress_shown = None

    def new_logs(self) -> list[dict[str, Any]]:
        """The run's logs not read before: those from LOG_LATE_S before the newest one read
        (a process sends its logs in batches), at most LOG_PAGES pages a round. (Not by the
        server's text search: on SQLite it fails, with no `concat`.)"""
        logs: dict[str, Any] = {"flow_run_id": {"any_": [self.run["id"]]}}
        if self.newest_log is not None:
            since = self.newest_log - timedelta(seconds=LOG_LATE_S)
            logs["timestamp"] = {"after_": since.isoformat()}
        new: list[dict[str, Any]] = []
        for page in range(LOG_PAGES):
            body = {"logs": logs, "sort": "TIMESTAMP_ASC", "offset": page * 200, "limit": 200}
            answer = self.api.post("/logs/filter", body)
            new += [log for log in answer if log["id"] not in self.logs_read]
            if len(answer) < 200:
                break
        for log in new:
            self.logs_read.add(log["id"])
            stamp = datetime.fromisoformat(log["timestamp"])
            self.newest_log = max(stamp, self.newest_log or stamp)
        return new

    def read_children(self) -> None:
        """The run's child flow runs (the train stage's own deployment), their states shown."""
        self.children = self.api.post(
            "/flow_runs/filter",
            {"flow_runs": {"parent_flow_run_id": {"any_": [self.run["id"]]}}, "limit": 20},
        )
        for child in self.children:
            self.show_state(child, f"train flow run {child['name']}")

    def read_progress(self, stage: str) -> None:
        """The stage's newest progress artifact in the run or its children, and when first seen."""
        runs = [self.run["id"], *(child["id"] for child in self.children)]
        artifacts = self.api.post(
            "/artifacts/filter",
            {
                "artifacts": {
                    "key": {"any_": [progress_key(stage)]},
                    "flow_run_id": {"any_": runs},
                },
                "sort": "UPDATED_DESC",
                "limit": 1,
            },
        )
        if not artifacts or artifacts[0].get("data") is None:
            return
        newest = parse_progress(float(artifacts[0]["data"]), artifacts[0].get("description") or "")
        if self.progress is None or self.progress[0] != newest:
            self.progress = (newest, self.clock())

    def stage_line_or_progress(self, stage: str) -> None:
        """The running stage's progress when it moved (at most every PROGRESS_S), or where it
        stands once QUIET_S passed without a line."""
        now = self.clock()
        if self.progress is None:
            self.quiet_line(running_line(stage, now - self.stage_since))
            return
        progress, seen = self.progress
        left = time_left(progress.percent, seen - self.stage_since)
        left = None if left is None else left - (now - seen)
        line = progress_line(stage, progress, left, now - self.stage_since)
        if progress != self.progress_shown and now - self.last_line >= PROGRESS_S:
            self.progress_shown = progress
            self.say(line)
        else:
            self.quiet_line(line)

    def quiet_line(self, line: str) -> None:
        """`line`, where QUIET_S passed since the last one."""
        if self.clock() - self.last_line >= QUIET_S:
            self.say(line)

    def unanswered(self, error: BaseException) -> None:
        """A round the server did not answer: said, and fatal after API_DOWN_S of them."""
        now = self.clock()
        self.unanswered_since = self.unanswered_since or now
        if now - self.unanswered_since >= API_DOWN_S:
            raise WatchFailed(
                f"the Prefect server at {self.api.url} has not answered for "
                f"{now - self.unanswered_since:.0f} s: {error}",
                ExitCode.SERVICE_UNAVAILABLE,
            )
        self.quiet_line(f"  Prefect server not answering ({error}); asking again")

    def last_stage_lines(self, until: float, sleep: Callable[[float], None]) -> None:
        """A completed run's stage lines that had not arrived when it ended (its logs are sent
        in batches), waited for until `until`."""
        while self.run["state_type"] == "COMPLETED" and self.running_stage is not None:
            if self.clock() >= until:
                return
            sleep(POLL_S)
            try:
                self.read_stage_ends()
            except API_ERRORS:
                continue
