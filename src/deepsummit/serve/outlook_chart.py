"""The outlook's chart: each member's P by push day and the team's, per peak."""

from __future__ import annotations

from pathlib import Path

from deepsummit.serve.outlook import OutlookReport

CHART_FILE = "outlook.png"


def plot_outlook(report: OutlookReport, path: Path) -> Path:
    """One panel per peak: each member's P by push day (thin) and the team's mean P with the
    band of the model's ensemble members (bold), the best day marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, panels = plt.subplots(
        len(report.peaks), 1, figsize=(8, 3.2 * len(report.peaks)), squeeze=False
    )
    size = len(report.members)
    for axes, peak in zip(panels[:, 0], report.peaks, strict=True):
        days = [d.day for d in peak.days]
        for index in range(size):
            axes.plot(days, [d.members[index][0] for d in peak.days], color="0.7", lw=0.8)
        axes.fill_between(
            days,
            [d.low / size for d in peak.days],
            [d.high / size for d in peak.days],
            alpha=0.25,
            label="band (ensemble members)",
        )
        axes.plot(days, [d.expected / size for d in peak.days], marker="o", lw=2, label="team mean")
        best = peak.best
        late = days.index(best.day) > len(days) / 2  # label inwards, never off the panel
        axes.annotate(
            f"best {best.day:%d %b}",
            (best.day, best.expected / size),
            textcoords="offset points",
            xytext=(0, 10),
            ha="right" if late else "left",
        )
        # Up to a little above the highest P drawn (at least 0.1): on a 0–1 axis a winter
        # outlook of a few percent would be a flat line.
        highest = max(max(p, high) for d in peak.days for p, _, high in d.members)
        axes.set(ylabel="P(summit)", ylim=(0, min(1.0, max(0.1, 1.2 * highest))))
        axes.set_title(
            f"{peak.peakid}: model v{report.model_version}, weather {peak.weather_source} "
            f"(grey: each of {size} members)",
            fontsize=9,
        )
        axes.legend(loc="lower right", fontsize=8)
    figure.autofmt_xdate()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)
    return path
