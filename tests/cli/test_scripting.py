"""`deepsummit` as a script drives it: an exit code per kind of failure (listed in `--help` and the
module docstring), `status` as a health check with a JSON document, `--version` without a
registry, shell completion, and `ingest --peaks FILE` reading FILE."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from flows_fixtures import isolated_paths, write_bundle_slice
from services_fixtures import deepsummit, free_port
from typer.testing import CliRunner

from deepsummit.cli import app as cli
from deepsummit.cli.app import app
from deepsummit.cli.exit_codes import ExitCode, describe, exit_code
from deepsummit.contracts.champion import ModelFilesChanged
from deepsummit.core.errors import (
    BadInput,
    PipelineError,
    QuotaExhausted,
    ServiceUnavailable,
    SourceUnavailable,
    SourceUnreadable,
)
from deepsummit.core.http_retry import RetriesExhausted
from deepsummit.core.warehouse import WarehouseLocked
from deepsummit.services.supervisor import ServiceError


def one_line(text: str) -> str:
    """Help text without its box drawing and line breaks."""
    return re.sub(r"[\s│╭╮╰╯─]+", " ", text)


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (BadInput("age 300: not in 1..100"), ExitCode.BAD_INPUT),
        (SourceUnreadable("peaks.csv", "no such file"), ExitCode.BAD_INPUT),
        (ServiceUnavailable("no model deepsummit@champion"), ExitCode.SERVICE_UNAVAILABLE),
        (SourceUnavailable("http://x/peaks.csv", "cannot fetch"), ExitCode.SERVICE_UNAVAILABLE),
        (RetriesExhausted("http://x: 503 six times", 503), ExitCode.SERVICE_UNAVAILABLE),
        (ServiceError("mlflow-server exited while starting"), ExitCode.SERVICE_UNAVAILABLE),
        (WarehouseLocked("w.duckdb is locked"), ExitCode.SERVICE_UNAVAILABLE),
        (QuotaExhausted("Open-Meteo daily budget reached"), ExitCode.QUOTA_SPENT),
        (ModelFilesChanged("deepsummit v3: its files' sha256 differ"), ExitCode.FAILED),
        (PipelineError("validation split has a single class"), ExitCode.FAILED),
        (KeyError("a bug"), ExitCode.FAILED),
    ],
)
def test_each_kind_of_error_has_its_exit_code(error: Exception, code: ExitCode) -> None:
    assert exit_code(error) == code


def test_the_help_and_the_module_docstring_list_the_exit_codes() -> None:
    root = CliRunner().invoke(app, ["--help"])
    command = CliRunner().invoke(app, ["predict", "--help"])
    assert root.exit_code == command.exit_code == 0
    for code in ExitCode:
        assert describe(code) in one_line(root.output)
        assert describe(code) in cli.__doc__
    assert "Exit codes: 0 ok, 1 failed, 2 bad input, 3 service unavailable, 4 quota spent" in (
        one_line(command.output)
    )


def test_bad_input_exits_2_and_a_registry_that_does_not_answer_3(tmp_path: Path) -> None:
    runner = CliRunner()
    usage = runner.invoke(app, ["predict", "--peak", "EVER"])  # no --push-date
    assert usage.exit_code == ExitCode.BAD_INPUT

    planned = ["predict", "--peak", "EVER", "--push-date", "2019-05-10"]
    no_warehouse = runner.invoke(
        app,
        [*planned, "--warehouse", str(tmp_path / "none.duckdb"), "--json"],
        env={"DEEPSUMMIT_MLFLOW__TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"},
    )
    assert no_warehouse.exit_code == ExitCode.BAD_INPUT
    assert no_warehouse.stdout == ""  # --json: no document for a failure, the line on stderr
    assert no_warehouse.stderr == (
        f"error: {tmp_path / 'none.duckdb'}: no warehouse there; pass --warehouse, or run "
        "`deepsummit ingest`\n"
    )

    silent = f"http://127.0.0.1:{free_port()}"
    down = runner.invoke(app, [*planned, "--tracking-uri", silent])
    assert down.exit_code == ExitCode.SERVICE_UNAVAILABLE
    assert down.stderr.startswith(f"error: MLflow tracking server {silent} is not answering")


def test_status_is_a_health_check_with_a_json_document(tmp_path: Path) -> None:
    """Nothing runs on these ports: status says so, in JSON, and exits 3."""
    overrides = isolated_paths(tmp_path)
    overrides["services"].update(prefect_port=free_port(), mlflow_port=free_port())
    result = deepsummit(overrides, "status", "--json")
    assert result.returncode == ExitCode.SERVICE_UNAVAILABLE
    document = json.loads(result.stdout)
    services = document["services"]
    assert [s["name"] for s in services] == ["prefect-server", "mlflow-server", "worker"]
    assert not any(s["healthy"] or s["running"] for s in services)
    assert document["warehouse"] == {"path": overrides["paths"]["warehouse"], "bytes": None}
    assert result.stderr.strip().splitlines()[-1] == (
        "error: not healthy: prefect-server, mlflow-server, worker"
    )


def test_version_says_briefly_that_the_registry_does_not_answer() -> None:
    silent = f"http://127.0.0.1:{free_port()}"
    result = CliRunner().invoke(app, ["--version"], env={"DEEPSUMMIT_MLFLOW__TRACKING_URI": silent})
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [
        "deepsummit 0.1.0",
        f"champion: unknown, the registry is not answering (deepsummit@champion at {silent})",
    ]


def test_shell_completion_completes_the_commands() -> None:
    # Typer finds the user's shell among the command's parents: run it from bash, as a user
    # does (`; :` keeps bash from replacing itself with the command). A test runner's own
    # parents need not hold a shell (a runner started by nohup has none).
    command = f"{shlex.quote(str(Path(sys.executable).parent / 'deepsummit'))} --show-completion; :"
    script = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60)
    assert "_DEEPSUMMIT_COMPLETE=complete_bash" in script.stdout, script.stdout + script.stderr
    runner = CliRunner()
    asked = {"COMP_WORDS": "deepsummit pre", "COMP_CWORD": "1"}
    completed = runner.invoke(
        app, [], prog_name="deepsummit", env={"_DEEPSUMMIT_COMPLETE": "complete_bash", **asked}
    )
    assert completed.output.split() == ["predict"]


def test_ingest_reads_the_peaks_file_given_on_the_command_line(tmp_path: Path) -> None:
    """`--peaks FILE` is the records' peaks file (it once fed the outlook's peak ids instead,
    and the bundle's peaks were read): the clean peaks table holds FILE's peaks."""
    data = write_bundle_slice(tmp_path / "data")
    peaks = tmp_path / "two-peaks.csv"
    bundle_peaks = (data / "himalayan/peaks.csv").read_text().splitlines()
    peaks.write_text(
        "\n".join(
            [bundle_peaks[0], *(row for row in bundle_peaks if row.startswith(("ANN1,", "KANG,")))]
        )
        + "\n"
    )
    overrides = isolated_paths(tmp_path / "run")
    overrides["paths"]["data_dir"] = str(data)
    overrides["services"].update(prefect_port=free_port(), mlflow_port=free_port())
    result = deepsummit(overrides, "ingest", "--peaks", str(peaks))
    assert result.returncode == 0, result.stderr[-2000:]
    with duckdb.connect(overrides["paths"]["warehouse"], read_only=True) as con:
        clean = con.sql("SELECT peakid FROM peaks ORDER BY peakid").fetchall()
        read = con.sql("SELECT DISTINCT _source FROM raw_peaks").fetchall()
    assert clean == [("ANN1",), ("KANG",)]
    assert read == [(str(peaks),)]
