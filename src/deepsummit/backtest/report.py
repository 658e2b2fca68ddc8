"""The backtest's report: markdown tables, charts, and the MLflow run that keeps them."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt
import mlflow
import numpy as np
import polars as pl

from deepsummit.backtest.outcome import MODELS, FoldOutcome
from deepsummit.backtest.push_days import PEAK_SEASON
from deepsummit.backtest.summary import JUDGED, PUSH_DAY_MODELS, BacktestReport
from deepsummit.contracts.champion import set_experiment
from deepsummit.core.config import Settings
from deepsummit.train.comparison import TRANSFORMER
from deepsummit.train.evaluation import WITHOUT_MAP
from deepsummit.train.member_groups import ALL_PEAKS

BACKTEST_RUN = "backtest"
SEASONS_CHART = "seasons.png"
PUSH_DAYS_CHART = "push_days.png"
REPORT_FILE = "report.md"


def markdown(report: BacktestReport) -> str:
    return (
        "\n".join(
            [
                *_season_lines(report),
                *_member_group_lines(report),
                *_peak_group_lines(report),
                *_expedition_lines(report),
                *_push_day_lines(report),
                "",
                "Folds: " + "; ".join(f"{o.fold.name} {_fold_state(o)}" for o in report.folds),
            ]
        )
        + "\n"
    )


def _season_lines(report: BacktestReport) -> list[str]:
    table = report.seasons
    lines = [
        "### Season by season (held out, rolling origin)",
        "",
        "Each fold answers one year as the registered model answers: every model trained on "
        "every season before it, each through the map fitted on its member check (the newest "
        "years of members' own records before the test year, answered by the model trained on "
        "the years before them), a tree at the rounds its check counted, averaged over seeds. "
        "95% intervals from an expedition bootstrap. AUC within a season ranks "
        "that season's members; the pooled AUC also ranks years.",
        "",
        "| model | mean within-season AUC | with disaster seasons | pooled AUC |",
        "| --- | --- | --- | --- |",
        *(
            f"| {m} | {table.within_ordinary[m].render()} | {table.within[m].render()} "
            f"| {table.pooled[m].render()} |"
            for m in table.models
        ),
        "",
        *(f"- {name}: {diff.render(4)} (paired)" for name, diff in table.differences.items()),
        f"- mean band (the members' lowest to highest P) on a held-out row: "
        f"{report.seed_spread:.3f}",
        *_flag_lines(report.flags),
        "",
        "| season | rows | summit rate | "
        + " | ".join(f"{m} AUC" for m in MODELS)
        + " | transformer Brier | transformer ECE | note |",
        "| --- | ---: | ---: | " + " | ".join("---" for _ in MODELS) + " | --- | --- | --- |",
    ]
    for season in table.seasons:
        if season.scored:
            aucs = " | ".join(season.scores[m].auc.render() for m in MODELS)
            first = season.scores[MODELS[0]]
            figures = f"{aucs} | {first.brier.render()} | {first.ece.render()}"
        else:
            figures = " | ".join("–" for _ in range(len(MODELS) + 2))
        lines.append(
            f"| {season.season} | {season.rows:,} | {season.summit_rate:.2f} | {figures} "
            f"| {season.note} |"
        )
    return [*lines, ""]


def _peak_group_lines(report: BacktestReport) -> list[str]:
    differences = report.seasons.differences
    return [
        "#### By peak group (the same folds; each group's held-out rows on their own)",
        "",
        "| group | held-out rows | seasons scored | "
        + " | ".join(f"{m} within-season AUC" for m in MODELS)
        + " | "
        + " | ".join(differences)
        + " |",
        "| --- | ---: | ---: | " + " | ".join("---" for _ in (*MODELS, *differences)) + " |",
        *(
            f"| {group} | {t.rows:,} | {t.scored_seasons} | "
            + " | ".join(t.within_ordinary[m].render() for m in MODELS)
            + " | "
            + " | ".join(d.render(4) for d in t.differences.values())
            + " |"
            for group, t in report.groups.items()
        ),
    ]


def _expedition_lines(report: BacktestReport) -> list[str]:
    return [
        "",
        "### Seasons of expedition records, expedition by expedition",
        "",
        "An expedition without member rows says how many of its climbing members summited, not "
        "which, so every model gives its members one P: each is judged by expedition. AUC "
        "within a season ranks its expeditions' success (any member summited); the Brier score "
        "is of the team's summit fraction; the gap is |mean P − summit fraction| over the "
        "season's members. 95% intervals from an expedition bootstrap.",
        "",
        report.expeditions.markdown(),
    ]


def _push_day_lines(report: BacktestReport) -> list[str]:
    skill = report.push_days
    return [
        "",
        "### Push-day skill (held-out peak-seasons, archive weather as a perfect forecast)",
        "",
        "| model | mean Spearman (P per day vs summiters per day) | best day hit a summit day "
        "| decision AUC (pushes' success by their day's P) |",
        "| --- | --- | --- | --- |",
        *(
            f"| {m} | {skill.mean_spearman[m].render()} | {skill.hit_rate[m].render(2)} "
            f"| {skill.mean_decision[m].render()} |"
            for m in skill.models
        ),
        "",
        *(
            f"- {name}: Spearman {diff.render(3)}, decision AUC "
            f"{skill.decision_differences[name].render(3)} (paired over seasons)"
            for name, diff in skill.differences.items()
        ),
        "",
        "| peak-season | days | summit days | summiters | "
        + " | ".join(f"{m} ρ" for m in skill.models)
        + " |",
        "| --- | ---: | ---: | ---: | " + " | ".join("---:" for _ in skill.models) + " |",
        *(
            f"| {s.peakid} {s.year} {s.season} | {s.days} | {s.summit_days} | {s.summiters} | "
            + " | ".join(f"{s.spearman[m]:+.2f}" for m in skill.models)
            + " |"
            for s in skill.seasons
        ),
    ]


def _fold_state(outcome: FoldOutcome) -> str:
    if outcome.skipped:
        return f"skipped: {outcome.skipped}"
    return "read from cache" if outcome.cached else "trained"


def season_chart(report: BacktestReport, path: Path) -> Path:
    scored = [s for s in report.seasons.seasons if s.scored]
    figure, axis = plt.subplots(figsize=(max(8, 0.45 * len(scored)), 4))
    x = np.arange(len(scored))
    offsets = np.linspace(-0.3, 0.3, len(MODELS))
    for offset, model in zip(offsets, MODELS, strict=True):
        estimates = np.array([s.scores[model].auc.estimate for s in scored])
        low = estimates - np.array([s.scores[model].auc.low for s in scored])
        high = np.array([s.scores[model].auc.high for s in scored]) - estimates
        axis.errorbar(x + offset, estimates, yerr=[low, high], fmt="o", ms=3, label=model)
    axis.set_xticks(x, [s.season for s in scored], rotation=70, fontsize=7)
    axis.set_ylabel("AUC within the season (95% CI)")
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def push_day_chart(daily: pl.DataFrame, path: Path) -> Path:
    """One panel per peak-season: summiters per day as bars, each model's P as a line."""
    keys = daily.select(PEAK_SEASON).unique(maintain_order=True).rows()
    columns = 3
    rows = max(1, -(-len(keys) // columns))
    figure, axes = plt.subplots(rows, columns, figsize=(5 * columns, 2.6 * rows), squeeze=False)
    for axis, key in zip(axes.flat, keys, strict=False):
        days = daily.filter(pl.struct(PEAK_SEASON) == dict(zip(PEAK_SEASON, key, strict=True)))
        axis.bar(days["smtdate"].to_list(), days["summiters"].to_list(), color="0.8")
        twin = axis.twinx()
        for model in PUSH_DAY_MODELS:
            values = days[model].to_numpy()
            span = np.ptp(values) or 1.0
            twin.plot(days["smtdate"].to_list(), (values - values.min()) / span, label=model)
        axis.set_title(" ".join(map(str, key)), fontsize=9)
        axis.tick_params(axis="x", labelsize=6, rotation=45)
        twin.set_yticks([])
    for axis in list(axes.flat)[len(keys) :]:
        axis.axis("off")
    axes.flat[0].figure.legend(*twin.get_legend_handles_labels(), loc="lower right", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def write_report(report: BacktestReport) -> dict[str, Path]:
    files = {
        "report": report.directory / REPORT_FILE,
        "seasons": season_chart(report, report.directory / SEASONS_CHART),
        "push_days": push_day_chart(report.daily, report.directory / PUSH_DAYS_CHART),
    }
    files["report"].write_text(markdown(report))
    return files


def log_to_mlflow(
    settings: Settings,
    report: BacktestReport,
    files: dict[str, Path],
    tags: Mapping[str, str] | None = None,
) -> str:
    """One MLflow run (tag kind=backtest) with the figures as metrics and the report and charts
    as artifacts; returns its id."""
    set_experiment(settings.mlflow.tracking_uri, settings.mlflow.experiment)
    run_tags = {**(tags or {}), "kind": BACKTEST_RUN}
    with mlflow.start_run(run_name="backtest", tags=run_tags) as run:
        mlflow.log_params(
            {
                "profile": settings.profile,
                "folds": f"{report.folds[0].fold.name}-{report.folds[-1].fold.name}",
                "member_check_years": settings.train.member_check_years,
                "seeds": settings.train.seeds,
            }
        )
        mlflow.log_metrics({k: v for k, v in report.metrics().items() if np.isfinite(v)})
        for path in files.values():
            mlflow.log_artifact(str(path), "backtest")
        return run.info.run_id


def _flag_lines(flags: Mapping[str, str]) -> list[str]:
    """The models whose answer barely moves (deepsummit/train/comparison.py): no skill."""
    return [
        f"- flagged, {model}: {why}; its figures are no skill"
        for model, why in flags.items()
        if why
    ]


def _member_group_lines(report: BacktestReport) -> list[str]:
    """The member seasons by member group, and what the transformer's map does."""
    groups = report.member_groups
    error = groups[ALL_PEAKS].error
    gap = report.expeditions.gap
    lines = [
        "### Member seasons by member group",
        "",
        "Mean P against the observed summit rate for each group a user belongs to; the group "
        "error is the member-weighted mean |mean P − observed| over the groups of at least "
        f"{groups[ALL_PEAKS].min_members} members.",
        "",
        "| model | group error, all peaks | "
        + " | ".join(f"{scope}" for scope in groups if scope != ALL_PEAKS)
        + " | ECE, member seasons |",
        "| --- | --- | " + " | ".join("---" for _ in range(len(groups) - 1)) + " | --- |",
        *(
            f"| {m} | {error[m].render()} | "
            + " | ".join(t.error[m].render() for s, t in groups.items() if s != ALL_PEAKS)
            + f" | {report.ece[m].render()} |"
            for m in JUDGED
        ),
        "",
        f"What the map does (the transformer, {WITHOUT_MAP} against as served): group error "
        f"{error[WITHOUT_MAP].render()} → {error[TRANSFORMER].render()}; ECE of the member "
        f"seasons {report.ece[WITHOUT_MAP].render()} → {report.ece[TRANSFORMER].render()}; "
        f"mean gap of the expedition seasons {gap[WITHOUT_MAP].render()} → "
        f"{gap[TRANSFORMER].render()}.",
        "",
    ]
    for table in groups.values():
        lines += [table.markdown(), ""]
    return lines
