"""The two markdown artifacts of a `summit` run: lineage, and the training summary."""

from __future__ import annotations

import base64
from typing import Any

from deepsummit.contracts.training_report import LineageRow, TrainingReport


def _cell(value: object) -> str:
    return str(value).replace("|", "\\|") if value is not None else "—"


def lineage_markdown(rows: list[LineageRow], flow_run: str) -> str:
    lines = [
        f"# Lineage of `{flow_run}`",
        "",
        " → ".join(dict.fromkeys(r.stage for r in rows)),
        "",
        "| stage | asset key | rows | digest | state | links |",
        "| --- | --- | ---: | --- | --- | --- |",
    ]
    lines += [
        f"| {r.stage} | `{_cell(r.asset_key)}` | {_cell(r.rows)} "
        f"| {f'`{r.digest[:16]}`' if r.digest else '—'} "
        f"| {r.state} | {r.links} |"
        for r in rows
    ]
    return "\n".join(lines) + "\n"


def link(text: str, url: str | None) -> str:
    return f"[{text}]({url})" if url else text


def drift_markdown(check: Any) -> str:
    """The drift table (drifted features marked), or why nothing was compared."""
    lines = ["# Input drift", ""]
    if check.report is None:
        return "\n".join([*lines, f"Not compared: {check.note}."]) + "\n"
    warning = check.report.warning()
    lines += [f"**Warning:** {warning}" if warning else "No feature drifted.", ""]
    return "\n".join([*lines, f"Champion: {check.note}.", "", check.report.markdown()]) + "\n"


def summary_markdown(report: TrainingReport, drift: Any) -> str:
    """The decision-time comparison of the transformer and the baselines, the champion
    decision, and the input drift line."""
    status = "champion" if report.champion else "challenger"
    lines = [
        f"# {report.model_name} v{report.model_version}: {status}",
        "",
        f"**Decision:** {report.decision_reason}",
        "",
        f"{report.judged_line} Weather source `{report.weather_source}`; features "
        f"`{report.digest[:12]}`; {len(report.inputs)} tabular inputs, all known by the push "
        "decision.",
        "",
        report.tables_markdown,
        f"**{drift.render()}**" if drift.report and drift.report.warning() else drift.render(),
        "",
        f"{link('MLflow run', report.run_url)} · {link('model version', report.model_url)}",
    ]
    return "\n".join(lines) + "\n"


def markdown_with_charts(result: Any) -> str:
    """The backtest's report with its charts inline (an artifact page holds no files)."""
    charts = [
        f"![{name}](data:image/png;base64,{base64.b64encode(path.read_bytes()).decode()})"
        for name, path in result.files.items()
        if path.suffix == ".png"
    ]
    return "\n\n".join([result.render(), *charts]) + "\n"
