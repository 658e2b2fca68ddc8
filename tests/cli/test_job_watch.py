"""`deepsummit main-job`'s watch against a scripted Prefect API on a clock of its own: no
server, no waiting. What the server says at each second of the script, and what the command
prints: each stage as it ends, the training's progress, never a silence over QUIET_S, and an
end by the deadline."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from deepsummit.cli.exit_codes import ExitCode
from deepsummit.cli.job_watch import QUIET_S, Watch, WatchFailed, parameters
from deepsummit.flows.stage_ends import StageEnd, progress_key

STAGES = ("ingest", "weather", "features", "train", "drift")
RUN = "run-1"
START = datetime(2026, 5, 1, tzinfo=UTC)
CHILD = "child-1"


class ScriptedApi:
    """The server's answers at the script's time `now`: the run Late until 5 s, Running until
    `ends_at`, each stage ending at its time in `ended_at`, a child run for the training and its
    progress artifact going from 0 to 100% between 100 s and 300 s."""

    url = "http://scripted/api"

    def __init__(self, ended_at: dict[str, float], ends_at: float, final: str = "COMPLETED"):
        self.now = 0.0
        self.ended_at, self.ends_at, self.final = ended_at, ends_at, final

    def get(self, path: str) -> dict[str, Any]:
        assert path == f"/flow_runs/{RUN}"
        if self.now < 5:
            state = ("SCHEDULED", "Late")
        elif self.now < self.ends_at:
            state = ("RUNNING", "Running")
        else:
            state = (self.final, self.final.title())
        return {"id": RUN, "name": "crafty-yak", "state_type": state[0], "state_name": state[1],
                "state": {"message": "PipelineError: train: no rows"}}  # fmt: skip

    def post(self, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
        if path == "/logs/filter":
            assert body["logs"]["flow_run_id"] == {"any_": [RUN]}
            since = body["logs"].get("timestamp", {}).get("after_", "")
            logs = [
                {"id": f"log-{at}", "timestamp": (START + timedelta(seconds=at)).isoformat(),
                 "message": StageEnd(stage, "Completed", 10.0, f"{stage} made").message()}
                for stage, at in self.ended_at.items()
                if at <= self.now
            ] + [
                {"id": f"epoch-{second}", "message": f"seed 42 epoch {second}",
                 "timestamp": (START + timedelta(seconds=second)).isoformat()}
                for second in range(int(self.now))
            ]  # fmt: skip
            logs = sorted(
                (log for log in logs if log["timestamp"] > since), key=lambda log: log["timestamp"]
            )
            return logs[body["offset"] : body["offset"] + body["limit"]]
        if path == "/flow_runs/filter":
            labels = {"prefect.worker.name": "gpu-1"}
            return [{"id": CHILD, "name": "crafty-yak-train", "state_type": "RUNNING",
                     "state_name": "Running", "labels": labels}]  # fmt: skip
        assert path == "/artifacts/filter"
        if body["artifacts"]["key"] != {"any_": [progress_key("train")]}:
            return []  # the other stages report no progress here
        percent = min(100.0, max(0.0, (self.now - 100) / 2))
        epoch = int(percent / 100 * 9)
        description = f"train: {epoch} of 9 (training {epoch // 3 + 1} of 3 (x), epoch {epoch})"
        return [{"data": percent, "description": description}] if self.now >= 100 else []


def watched(api: ScriptedApi, deadline: float = 1000) -> tuple[list[tuple[float, str]], Any]:
    """The lines printed, each with the script's time, and the run as the watch ended."""
    lines: list[tuple[float, str]] = []

    def sleep(seconds: float) -> None:
        api.now += seconds

    watch = Watch(api, {"id": RUN, "name": "crafty-yak"}, STAGES,
                  lambda line: lines.append((api.now, line)), clock=lambda: api.now)  # fmt: skip
    return lines, watch.follow(deadline, sleep=sleep)


ENDED_AT = {"ingest": 30, "weather": 40, "features": 95, "train": 302, "drift": 310}


def test_every_stage_has_its_line_and_no_silence_lasts() -> None:
    lines, run = watched(ScriptedApi(ENDED_AT, ends_at=312))
    assert run["state_type"] == "COMPLETED"
    texts = [text for _, text in lines]
    stage_lines = [text for text in texts if text.endswith(" made")]
    assert [text.split()[0] for text in stage_lines] == list(STAGES)
    times = [0.0] + [at for at, _ in lines]
    assert max(b - a for a, b in itertools.pairwise(times)) <= QUIET_S
    assert "  summit/train: late: no worker of its pool has taken it yet" in texts
    assert "  train flow run crafty-yak-train: running on worker gpu-1" in texts
    progress = [text for text in texts if text.startswith("  train: training")]
    assert {text.split(" (")[0] for text in progress} >= {
        "  train: training 1 of 3",
        "  train: training 2 of 3",
    }
    assert all(" left" in text for text in progress)
    assert any(text.startswith("  features: running for") for text in texts)


def test_stage_lines_logged_late_are_waited_for_after_the_run_ends() -> None:
    lines, _ = watched(ScriptedApi({**ENDED_AT, "drift": 320}, ends_at=312))
    assert lines[-1][1].startswith("drift")


def test_a_failed_run_is_returned_as_it_ended() -> None:
    lines, run = watched(ScriptedApi({"ingest": 30}, ends_at=50, final="FAILED"))
    assert run["state_name"] == "Failed"
    assert [text.split()[0] for _, text in lines if text.endswith(" made")] == ["ingest"]


def test_the_watch_gives_up_at_its_deadline() -> None:
    with pytest.raises(WatchFailed, match="gave up watching: flow run crafty-yak is Running"):
        watched(ScriptedApi(ENDED_AT, ends_at=10_000), deadline=120)


def test_a_server_that_stops_answering_ends_the_watch() -> None:
    class Down(ScriptedApi):
        def get(self, path: str) -> dict[str, Any]:
            if self.now >= 20:
                raise ConnectionRefusedError("refused")
            return super().get(path)

    with pytest.raises(WatchFailed, match="has not answered for 6") as failed:
        watched(Down(ENDED_AT, ends_at=312))
    assert failed.value.code == ExitCode.SERVICE_UNAVAILABLE


def test_parameters_are_json_where_they_parse() -> None:
    assert parameters(['options={"max_train_rows": 5000}', "profile=tiny"]) == {
        "options": {"max_train_rows": 5000},
        "profile": "tiny",
    }
    with pytest.raises(WatchFailed) as failed:
        parameters(["profile"])
    assert failed.value.code == ExitCode.BAD_INPUT
