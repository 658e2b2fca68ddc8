"""The services of an end-to-end test session: `deepsummit up` on free ports with every file
under one temporary folder, and helpers to drive the chain and ask the Prefect server about it."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flows_fixtures import as_environment, isolated_paths, write_bundle_slice
from services_fixtures import free_port

from deepsummit.core.config import Settings, deep_merge, load_settings
from deepsummit.core.sections import PROJECT_ROOT
from deepsummit.flows.training import TRAINING_FLOW
from deepsummit.services import supervisor as services

PREFECT = str(Path(sys.executable).parent / "prefect")
# In the task key of the task run Prefect adds to a flow run that starts a deployment's run.
RUN_DEPLOYMENT_TASK = "run_deployment"
# A command that runs a flow (outlook, weather) takes seconds on a quiet machine and minutes on a
# busy one; pytest-timeout bounds the whole test.
COMMAND_TIMEOUT_S = 600
# How often a run's state or its events are asked for: a wait loses half of it on average.
POLL_S = 0.5
# The chain trains the default profile's network, judged against its baselines with the tiny
# profile's boosting budgets: the trees are still counted, mapped, refit and judged, in seconds
# of CPU on the slice.
TREE_BUDGETS = load_settings("tiny").baselines.model_dump(
    include={"max_rounds", "patience", "seeds"}
)


@dataclass
class TimedCommand:
    """A command running in the background, each line of its output (stdout and stderr) kept
    with the time it arrived (time.monotonic)."""

    process: subprocess.Popen
    started: float
    lines: list[tuple[float, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    @property
    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def wait_for_line(self, pattern: str, timeout_s: float) -> re.Match[str]:
        """The first line matching `pattern`, once it has arrived."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for _, line in list(self.lines):
                if found := re.search(pattern, line):
                    return found
            if self.process.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(POLL_S)
        raise AssertionError(f"no line matching {pattern!r} after {timeout_s} s:\n{self.text}")

    def wait(self, timeout_s: float) -> int:
        """Its exit code, once it exited and its output is read."""
        code = self.process.wait(timeout=timeout_s)
        self._reader.join(timeout=30)
        return code

    def gaps(self) -> list[float]:
        """Seconds between consecutive lines, from the start to the first line too."""
        times = [self.started] + [at for at, _ in self.lines]
        return [later - earlier for earlier, later in itertools.pairwise(times)]


class Stack:
    """The services of one test session, and helpers to drive and query them."""

    def __init__(self, root: Path, extra: dict[str, Any] | None = None) -> None:
        on_postgres = (extra or {}).get("services", {}).get("database") == "postgresql"
        overrides = isolated_paths(root, prefect_sqlite=not on_postgres)
        overrides["paths"]["data_dir"] = str(write_bundle_slice(root / "data"))
        overrides["services"].update(
            prefect_port=free_port(), mlflow_port=free_port(), scorer_port=free_port()
        )
        overrides["baselines"] = TREE_BUDGETS
        mlflow_url = f"http://127.0.0.1:{overrides['services']['mlflow_port']}"
        overrides["mlflow"] = {"tracking_uri": mlflow_url}
        overrides = deep_merge(overrides, extra or {})
        self.overrides = overrides
        self.root = root
        self.env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("PREFECT_", "DEEPSUMMIT_"))
        }
        self.env.update(as_environment(overrides))
        # The CLI and this test use the servers of this session, like the worker does.
        self.settings: Settings = load_settings(overrides=overrides)
        self.env.update(services.prefect_env(self.settings))

    def up(self) -> None:
        """`deepsummit up`, then talk to the server with the secret it generated."""
        self.cli("up")
        self.use_servers()

    def use_servers(self) -> None:
        """Talk to the Prefect server of these settings with the secret generated for it (by
        `up`, or by whoever started it)."""
        self.env.update(services.prefect_env(self.settings))
        self.prefect = services.prefect_api(self.settings)

    def cli(self, *args: str, exit_code: int = 0) -> str:
        """`deepsummit <args>` against the stack; its stdout, once it exited `exit_code`."""
        result = subprocess.run(
            [sys.executable, "-m", "deepsummit.cli.app", *args],
            env=self.env, cwd=PROJECT_ROOT, capture_output=True, text=True,
            timeout=COMMAND_TIMEOUT_S,
        )  # fmt: skip
        assert result.returncode == exit_code, result.stdout + result.stderr
        return result.stdout

    def start_cli(self, *args: str) -> TimedCommand:
        """`deepsummit <args>` against the stack, in the background, its lines timed."""
        process = subprocess.Popen(
            [sys.executable, "-m", "deepsummit.cli.app", *args],
            env={**self.env, "PYTHONUNBUFFERED": "1"}, cwd=PROJECT_ROOT, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        return TimedCommand(process, time.monotonic())

    def trigger(self, *params: str, watch: bool = True, deployment: str = "summit/train") -> str:
        """`prefect deployment run <deployment>`; the flow run id."""
        command = [PREFECT, "deployment", "run", deployment]
        command += [arg for p in params for arg in ("--param", p)]
        # Asked every second (Prefect's default is 5 s): the run's end is seen as it comes.
        command += ["--watch", "--watch-interval", "1", "--watch-timeout", "600"] if watch else []
        result = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=660)
        assert result.returncode == 0, result.stdout + result.stderr
        return re.search(r"UUID: ([0-9a-f-]{36})", result.stdout).group(1)

    def post(self, path: str, body: dict[str, Any]) -> Any:
        return self.prefect.post(path, body)

    def get(self, path: str) -> Any:
        return self.prefect.get(path)

    def wait_finished(self, flow_run_id: str, timeout_s: float = 600) -> dict[str, Any]:
        return self.wait_first_finished(flow_run_id, timeout_s=timeout_s)

    def wait_first_finished(self, *flow_run_ids: str, timeout_s: float = 600) -> dict[str, Any]:
        """The first of the runs to end, as it ended."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for flow_run_id in flow_run_ids:
                try:
                    run = self.get(f"/flow_runs/{flow_run_id}")
                except TimeoutError:  # a server busy writing two runs' logs: ask again
                    continue
                if run["state_type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
                    return run
            time.sleep(POLL_S)
        raise AssertionError(f"none of flow runs {flow_run_ids} finished after {timeout_s} s")

    def materialized(self, *flow_run_ids: str, timeout_s: float = 60) -> dict[str, set[str]]:
        """Asset key → its upstream asset keys, from the runs' materialisation events (the
        server persists events in batches: wait until the model version's has arrived)."""
        deadline = time.monotonic() + timeout_s
        while True:
            events = self.post(
                "/events/filter",
                {
                    "filter": {
                        "event": {"name": ["prefect.asset.materialization.succeeded"]},
                        "related": {"id": [f"prefect.flow-run.{i}" for i in flow_run_ids]},
                    },
                    "limit": 50,
                },
            )["events"]
            upstream = {
                e["resource"]["prefect.resource.id"]: {
                    r["prefect.resource.id"]
                    for r in e["related"]
                    if r.get("prefect.resource.role") == "asset"
                }
                for e in events
            }
            if any(key.startswith("mlflow://") for key in upstream):
                return upstream
            if time.monotonic() > deadline:
                raise AssertionError(f"no model version materialised: {sorted(upstream)}")
            time.sleep(POLL_S)

    def log_messages(self, flow_run_id: str, phrase: str) -> list[str]:
        """The flow run's log messages on the server that hold `phrase`, oldest first (read a
        page at a time: the server answers at most 200 a request)."""
        messages: list[str] = []
        while page := self.post(
            "/logs/filter",
            {
                "logs": {"flow_run_id": {"any_": [flow_run_id]}},
                "sort": "TIMESTAMP_ASC",
                "offset": len(messages),
                "limit": 200,
            },
        ):
            messages += [log["message"] for log in page]
        return [message for message in messages if phrase in message]

    def task_states(self, flow_run_id: str) -> dict[str, str]:
        """The run's tasks by name, without those standing for a child flow run (Prefect names
        one after its child and lists the child under Subflow Runs, not as a task)."""
        runs = self.post("/task_runs/filter", {"flow_runs": {"id": {"any_": [flow_run_id]}}})
        return {
            run["name"].rsplit("-", 1)[0]: run["state_name"]
            for run in runs
            if RUN_DEPLOYMENT_TASK not in run["task_key"]
        }

    def training_runs(self, chain_run_id: str) -> dict[str, dict[str, Any]]:
        """The flow runs of the training flow whose parent task run is in `chain_run_id`, by
        name."""
        runs = self.post("/flow_runs/filter", {"flows": {"name": {"any_": [TRAINING_FLOW]}}})
        return {
            run["name"]: run
            for run in runs
            if run["parent_task_run_id"]
            and self.get(f"/task_runs/{run['parent_task_run_id']}")["flow_run_id"] == chain_run_id
        }

    def training_run(self, chain_run_id: str) -> dict[str, Any]:
        """The one flow run of the training flow whose parent task run is in `chain_run_id`."""
        [child] = self.training_runs(chain_run_id).values()
        return child
