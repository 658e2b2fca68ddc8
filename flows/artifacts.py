"""The two markdown artifacts of a `summit` run: lineage, and the training summary."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LineageRow:
    stage: str
    asset_key: str
    rows: int | None
    digest: str
    state: str  # Completed or Cached: whether this run computed the stage or reused it
    links: str = ""


def _cell(value: object) -> str:
    return str(value).replace("|", "\\|") if value is not None else "—"


def lineage_markdown(rows: list[LineageRow], flow_run: str) -> str:
    lines = [
        f"# Lineage of `{flow_run}`",
        "",
        "raw records → clean tables → weather → features → model version",
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


def summary_markdown(report: Any) -> str:
    """Test metrics of the transformer against the baselines, and the champion decision."""
    transformer, *baselines = report.scores
    best_baseline = max((b.metrics.auc for b in baselines), default=None)
    lines = [
        f"# {report.model_name} v{report.model_version}: "
        f"{'champion' if report.champion else 'challenger'}",
        "",
        f"**Decision:** {report.decision_reason}",
        "",
        f"Test split: {report.rows['test']:,} attempts (trained on {report.rows['train']:,}, "
        f"validated on {report.rows['validation']:,}); weather source `{report.weather_source}`; "
        f"features `{report.digest[:12]}`; best epoch {report.best_epoch} of {report.epochs_run}.",
        "",
        "| model | AUC | accuracy | Brier | ECE | log loss | train s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for score in report.scores:
        m = score.metrics
        lines.append(
            f"| {score.name} | {m.auc:.4f} | {m.accuracy:.4f} | {m.brier:.4f} | {m.ece:.4f} "
            f"| {m.log_loss:.4f} | {score.train_seconds:.1f} |"
        )
    if best_baseline is not None:
        delta = transformer.metrics.auc - best_baseline
        lines += ["", f"AUC against the best baseline: {delta:+.4f}"]
    lines += [
        "",
        f"{link('MLflow run', report.run_url)} · {link('model version', report.model_url)}",
    ]
    return "\n".join(lines) + "\n"
