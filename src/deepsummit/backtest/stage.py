"""The backtest stage: the rolling-origin backtest of a features snapshot, its report and charts
on disk and in an MLflow run of its own (tag kind=backtest)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from deepsummit.backtest.report import log_to_mlflow, markdown, write_report
from deepsummit.backtest.run import run_backtest
from deepsummit.backtest.summary import BacktestReport
from deepsummit.core.config import Settings
from deepsummit.core.context import RunContext


@dataclass(frozen=True)
class BacktestRun:
    report: BacktestReport
    files: dict[str, Path]  # the report and its charts
    mlflow_run_id: str

    def render(self) -> str:
        return (
            f"{markdown(self.report)}\nreport: {self.files['report']}\n"
            f"MLflow run: {self.mlflow_run_id}"
        )


def backtest(settings: Settings, context: RunContext, features_snapshot: Path) -> BacktestRun:
    """Backtest the snapshot fold by fold (each fold cached: see deepsummit/backtest/run.py)."""
    report = run_backtest(settings, features_snapshot, context.progress)
    files = write_report(report)
    return BacktestRun(report, files, log_to_mlflow(settings, report, files, context.tags))
