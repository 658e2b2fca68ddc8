"""The drift stage: how far the newest season's inputs have moved from what the champion was
trained on in the same season and weeks (population stability per tabular input, the shift of
each weather variable's mean; deepsummit/drift/monitor.py says what is compared with what).

It reads a features snapshot and the champion, so a new champion renews this report and
nothing else; the report is written as JSON under `<var_dir>/drift/` and logged to MLflow as a
run of its own (PSI per feature as metrics, the table as text).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import mlflow

from deepsummit.contracts.artifact import DRIFT_PROFILE
from deepsummit.contracts.champion import champion_file, set_experiment
from deepsummit.contracts.distribution import DistributionProfile
from deepsummit.contracts.preprocessing import Preprocessor
from deepsummit.contracts.snapshot import PREPROCESSING_FILE, read_features, read_windows
from deepsummit.core.config import Settings
from deepsummit.core.context import RunContext
from deepsummit.core.seasons import newest_season_rows
from deepsummit.core.sections import MlflowConfig, PathsConfig
from deepsummit.drift.comparison import DriftReport
from deepsummit.drift.monitor import input_drift

REPORTS_DIR = "drift"  # under paths.var_dir


@dataclass(frozen=True)
class DriftCheck:
    """The newest season against the champion's training split, or why it was not compared."""

    report: DriftReport | None
    note: str  # e.g. "no champion yet"
    path: Path | None = None  # the report as JSON

    def render(self) -> str:
        if self.report is None:
            return f"input drift: not compared ({self.note})"
        return self.report.warning() or (
            f"input drift: none ({self.report.thresholds}; {self.report.current} "
            f"against {self.report.reference})"
        )


def reports_dir(paths: PathsConfig) -> Path:
    return paths.var_dir / REPORTS_DIR


def check_drift(settings: Settings, context: RunContext, features_snapshot: Path) -> DriftCheck:
    """The snapshot's newest season against the champion's training split; "not compared"
    when the registry has no champion with a drift reference."""
    found = champion_file(settings.mlflow, DRIFT_PROFILE)
    if found is None:
        return DriftCheck(None, "no champion with a drift reference in the registry")
    version, reference = found
    rows, season = newest_season_rows(read_features(features_snapshot))
    report = input_drift(
        DistributionProfile.from_json(reference.read_text()),
        rows,
        read_windows(features_snapshot),
        Preprocessor.load(features_snapshot / PREPROCESSING_FILE).inputs,
        settings.drift,
        f"the newest season ({season}, {rows.height:,} attempts)",
    )
    if report is None:
        return DriftCheck(
            None,
            f"champion v{version} keeps no training rows of {season}'s season and weeks "
            "(a champion trained before they were kept: the next training keeps them)",
        )
    path = reports_dir(settings.paths) / f"{features_snapshot.name}-v{version}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report.as_dict(), indent=2))
    log_drift(settings.mlflow, report, version, context.tags)
    return DriftCheck(report, f"champion v{version}", path)


def log_drift(
    config: MlflowConfig, report: DriftReport, champion: str, tags: Mapping[str, str]
) -> None:
    """The drift report as an MLflow run of its own (PSI per feature as metrics, the table)."""
    set_experiment(config.tracking_uri, config.experiment)
    run_tags = {**tags, "kind": "input drift", "compared_with_version": champion}
    with mlflow.start_run(run_name=f"drift vs v{champion}", tags=run_tags):
        mlflow.log_metrics(report.metrics())
        mlflow.log_metric("drifted_features", len(report.drifted))
        mlflow.log_text(report.markdown(), "drift/drift.md")
        mlflow.log_dict(report.as_dict(), "drift/drift.json")
