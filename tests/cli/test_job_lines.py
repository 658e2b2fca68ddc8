"""The lines `deepsummit main-job` prints, as plain functions: a stage's end, the training's
progress, what the run waits for; and the stage-end log line the flow writes, read back."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from deepsummit.cli.job_lines import (
    Progress,
    duration,
    parse_progress,
    progress_line,
    reason,
    run_state_line,
    running_line,
    stage_line,
    time_left,
)
from deepsummit.flows.stage_ends import StageEnd, made


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0 s"), (12.4, "12 s"), (59.6, "1 min 00 s"), (185, "3 min 05 s"), (3720, "1 h 02 min")],
)
def test_durations_read_as_a_person_says_them(seconds: float, text: str) -> None:
    assert duration(seconds) == text


def test_a_stage_line_names_the_stage_what_it_made_and_its_seconds() -> None:
    end = StageEnd("ingest", "Completed", 12.3, "88,123 rows ingested, 312 quarantined")
    assert stage_line(end) == "ingest          12 s  88,123 rows ingested, 312 quarantined"
    cached = StageEnd("features", "Cached", 0.4, "28,455 feature rows")
    assert stage_line(cached) == "features         0 s  cached: 28,455 feature rows"
    assert stage_line(StageEnd("train", "Completed", 231, "")) == "train     3 min 51 s"


def test_stage_lines_line_up() -> None:
    lines = [
        stage_line(StageEnd(name, "Completed", seconds, "made"))
        for name, seconds in [("ingest", 5), ("weather", 61), ("features", 600), ("drift", 3)]
    ]
    assert {line.index("made") for line in lines} == {22}


def test_the_stage_end_log_line_reads_back_as_it_was_written() -> None:
    end = StageEnd("train", "Completed", 231.04, "model deepsummit v3 (champion), test AUC 0.781")
    message = end.message()
    assert message == (
        "stage ended: train (Completed, 231.0 s): model deepsummit v3 (champion), test AUC 0.781"
    )
    assert StageEnd.parse(message) == StageEnd("train", "Completed", 231.0, end.made)
    bare = StageEnd("drift", "Cached", 1.0, "")
    assert StageEnd.parse(bare.message()) == bare
    assert StageEnd.parse("train: Completed") is None
    assert StageEnd.parse("waiting for the deepsummit-warehouse slot") is None


def test_progress_reads_the_artifact_description_and_says_the_time_left() -> None:
    description = (
        "train: 4 of 9 (training 2 of 3 (before the test split), seed 42 (1 of 1), "
        "epoch 1 of 3: validation AUC 0.7012)"
    )
    progress = parse_progress(44.44, description)
    assert progress == Progress(
        44.44,
        "training 2 of 3 (before the test split), seed 42 (1 of 1), epoch 1 of 3: "
        "validation AUC 0.7012",
    )
    assert time_left(25.0, 60.0) == pytest.approx(180.0)
    assert time_left(0.0, 60.0) is None
    assert progress_line("train", progress, 130.0) == (
        "  train: training 2 of 3 (before the test split), seed 42 (1 of 1), epoch 1 of 3: "
        "validation AUC 0.7012; 44%, about 2 min 10 s left"
    )
    assert progress_line("weather", Progress(10.0, "3 of 30 calls"), None) == (
        "  weather: 3 of 30 calls; 10%"
    )
    done = Progress(100.0, "training 3 of 3 (refit on every season), done")
    assert progress_line("train", done, 0.0, 302) == (
        "  train: training 3 of 3 (refit on every season), done; 100%, finishing "
        "(running for 5 min 02 s)"
    )
    assert parse_progress(5.0, "no brackets here") == Progress(5.0, "no brackets here")


def test_a_run_that_waits_or_fails_says_so_in_words() -> None:
    assert run_state_line("summit/train", "AwaitingConcurrencySlot", 65) == (
        "  summit/train: queued behind another run of its deployment (one at a time) (1 min 05 s)"
    )
    assert run_state_line("summit/train", "Late") == (
        "  summit/train: late: no worker of its pool has taken it yet"
    )
    assert running_line("weather", 40) == "  weather: running for 40 s"
    message = "Flow run encountered an exception: PipelineError: train: no rows\nTraceback …"
    assert reason("Failed", message) == (
        "Failed: Flow run encountered an exception: PipelineError: train: no rows"
    )
    assert reason("Crashed", None) == "Crashed: no message"


def test_what_each_stage_made_in_a_few_words() -> None:
    sources = [
        SimpleNamespace(clean=80_000, quarantined=300),
        SimpleNamespace(clean=8_123, quarantined=12),
    ]
    ingest = SimpleNamespace(sources=sources, expectations_passed=True)
    assert made("ingest", ingest) == "88,123 rows ingested, 312 quarantined; expectations passed"
    weather = SimpleNamespace(rows=412_301, source="archive", stored=0, quarantined=0)
    assert made("weather", weather) == (
        "412,301 weather_daily rows (source archive), 0 written and 0 quarantined by this load"
    )
    splits = {"train": SimpleNamespace(attempts=20), "test": SimpleNamespace(attempts=5)}
    features = SimpleNamespace(rows=25, splits=splits, snapshot_digest="3f2a9c1e0b7d99")
    assert made("features", features) == "25 feature rows (train 20, test 5), snapshot 3f2a9c1e0b7d"
    train = SimpleNamespace(
        champion=True,
        model_name="deepsummit",
        model_version="3",
        test_auc=0.78125,
        served="transformer 0.55 + CatBoost 0.45",
    )
    assert made("train", train) == (
        "model deepsummit v3 (champion, transformer 0.55 + CatBoost 0.45), test AUC 0.781"
    )
    assert made("drift", SimpleNamespace(report=None, note="no champion yet")) == (
        "input drift not compared (no champion yet)"
    )
    drifted = SimpleNamespace(drifted=("a", "b", "c", "d"), rows=[None] * 20)
    assert made("drift", SimpleNamespace(report=drifted)) == (
        "input drift in 4 of 20 inputs: a, b, c, …"
    )
    assert made("train", SimpleNamespace()) == ""  # never fails the run
    assert made("outlook", object()) == ""
