"""The push-day outlook: P(summit) of each member, and the team's expected summiters, for each
candidate push day of the next two weeks, from the newest stored forecast, with the champion.

Every candidate day D is a planned attempt with its own 90 days D-89 … D: the forecast's past
days and the days ahead up to D. The champion scores them as any MLflow client would, through
its pyfunc (deepsummit/serve/pyfunc.py). Each P carries its band: the lowest and highest P of the
champion's ensemble members (deepsummit/serve/inference.py); the team's expected summiters is
the sum of its members' P (band: the sums of the lowest and of the highest). The best day is
the one with the most expected summiters.
"""

from __future__ import annotations

import base64
import csv
import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
from pydantic import ValidationError

from deepsummit.contracts.artifact import ModelArtifact
from deepsummit.contracts.champion import TAG_WEATHER_SOURCE, champion_version, load_verified
from deepsummit.core.config import Settings
from deepsummit.core.context import RunContext
from deepsummit.core.errors import BadInput
from deepsummit.core.inputs import WEATHER_VARIABLES, WINDOW_DAYS
from deepsummit.core.planned import planned_frame, planned_record
from deepsummit.core.sections import OutlookConfig, TeamMember
from deepsummit.core.warehouse import connect, registered, run
from deepsummit.drift.comparison import DriftReport
from deepsummit.drift.monitor import weather_drift
from deepsummit.serve.model_input import RefusedRequest
from deepsummit.serve.planned import parse_planned
from deepsummit.serve.prediction import BAND_MEANING
from deepsummit.serve.scoring import planned_features
from deepsummit.weather.forecast import (
    issued_at,
)

TEAM = "team"  # the `member` of a team row in the outlooks table
OUTLOOK_CHART_ALT = "P(summit) by push day"  # the chart's alt text in the artifact


def read_team(path: Path) -> tuple[TeamMember, ...]:
    """A team file: CSV with a header of TeamMember's fields (name required, the rest may be
    blank); one clear line naming the file and line of a row that cannot be read."""
    if not path.exists():
        raise BadInput(f"{path}: no such team file")
    columns = tuple(TeamMember.model_fields)
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        header = tuple(reader.fieldnames or ())
        if "name" not in header or set(header) - set(columns):
            raise BadInput(
                f"{path}: columns must be among {', '.join(columns)} (name required); "
                f"found {', '.join(header)}"
            )
        members = []
        for line, row in enumerate(reader, start=2):
            values = {k: v.strip() for k, v in row.items() if v and v.strip()}
            try:
                members.append(TeamMember.model_validate(values))
            except ValidationError as error:
                first = error.errors()[0]
                where = ".".join(map(str, first["loc"]))
                raise BadInput(f"{path}, line {line}: {where}: {first['msg']}") from None
    if not members:
        raise BadInput(f"{path}: no members")
    return tuple(members)


def team(config: OutlookConfig) -> tuple[TeamMember, ...]:
    return config.team or read_team(config.team_file)


@dataclass(frozen=True)
class DayOutlook:
    day: dt.date
    members: tuple[tuple[float, float, float], ...]  # (P, seeds' low, seeds' high) per member
    expected: float  # expected summiters of the team: the sum of the members' P
    low: float
    high: float


@dataclass(frozen=True)
class PeakOutlook:
    peakid: str
    weather_source: str  # forecast@<issue time>, the replay's source, or NO_WEATHER_SOURCE
    days: tuple[DayOutlook, ...]
    notes: tuple[str, ...]

    @property
    def best(self) -> DayOutlook:
        return max(self.days, key=lambda d: d.expected)


@dataclass(frozen=True)
class OutlookReport:
    members: tuple[TeamMember, ...]
    peaks: tuple[PeakOutlook, ...]
    model_version: str
    trained_on: str  # the weather source the model learnt from
    answered_by: str  # the models that answer, with their weights (ModelArtifact.parts)
    drift: DriftReport | None  # None: no peak was fed weather, or no like reference to compare
    chart: Path | None = None
    rows: int = 0  # rows written to the outlooks table

    def render(self) -> str:
        """Per peak: a column per push day, for each member P and under it the band of the
        model's ensemble members, then the team's expected summiters and its band; the best day
        starred."""
        width = max(16, *(len(m.name) for m in self.members))

        def row(label: str, cells: list[str]) -> str:
            return f"  {label:<{width}}" + "".join(f"{cell:>9}" for cell in cells)

        def band(low: float, high: float, digits: int) -> str:
            low_text, high_text = (f"{x:.{digits}f}".removeprefix("0") for x in (low, high))
            return f"{low_text}-{high_text}"

        lines = []
        for peak in self.peaks:
            lines += [
                f"{peak.peakid}: P(summit) per push day, the band below ({BAND_MEANING}); "
                f"model v{self.model_version} ({self.answered_by}, trained on "
                f"{self.trained_on!r} weather), fed "
                f"{peak.weather_source!r}",
                row(
                    "push day", [f"{d.day:%m-%d}{'*' if d == peak.best else ''}" for d in peak.days]
                ),
            ]
            for index, member in enumerate(self.members):
                cells = [d.members[index] for d in peak.days]
                lines.append(row(member.name, [f"{p:.2f}" for p, _, _ in cells]))
                lines.append(row("", [band(low, high, 2) for _, low, high in cells]))
            lines.append(row("team: expected", [f"{d.expected:.2f}" for d in peak.days]))
            lines.append(row("summiters", [band(d.low, d.high, 1) for d in peak.days]))
            best = peak.best
            lines.append(
                f"  best push day: {best.day} (*), {best.expected:.2f} expected summiters of "
                f"{len(self.members)} [{best.low:.2f}–{best.high:.2f}]"
                + (
                    "; without weather the days differ by the calendar only"
                    if peak.weather_source == NO_WEATHER_SOURCE
                    else ""
                )
            )
            lines += [f"  note: {note}" for note in peak.notes]
        if self.drift and self.drift.warning():
            lines.append(f"note: {self.drift.warning()}")
        if self.rows:
            lines.append(f"{self.rows} rows in the outlooks table")
        if self.chart is not None:
            lines.append(f"chart: {self.chart}")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        """The report as one JSON document (`deepsummit outlook --json`): per peak and push day
        the team's expected summiters and each member's P, with their bands."""
        names = [member.name for member in self.members]
        return {
            "model_version": self.model_version,
            "answered_by": self.answered_by,
            "trained_on": self.trained_on,
            "members": [member.model_dump(exclude_none=True) for member in self.members],
            "peaks": [
                {
                    "peakid": peak.peakid,
                    "weather_source": peak.weather_source,
                    "best_day": peak.best.day,
                    "days": [
                        {
                            "day": day.day,
                            "expected_summiters": day.expected,
                            "low": day.low,
                            "high": day.high,
                            "members": [
                                {"name": name, "probability": p, "low": low, "high": high}
                                for name, (p, low, high) in zip(names, day.members, strict=True)
                            ],
                        }
                        for day in peak.days
                    ],
                    "notes": list(peak.notes),
                }
                for peak in self.peaks
            ],
            "drift": self.drift.as_dict() if self.drift else None,
            "drift_note": self.drift.warning() if self.drift else None,
            "chart": self.chart,
            "rows_written": self.rows,
        }

    def markdown(self) -> str:
        """Each peak's table (team and members per day, with bands) and the chart, for a
        Prefect artifact."""
        lines = []
        for peak in self.peaks:
            best = peak.best
            lines += [
                f"## {peak.peakid}: best push day {best.day}, {best.expected:.2f} expected "
                f"summiters of {len(self.members)} [{best.low:.2f}–{best.high:.2f}]",
                "",
                f"Model v{self.model_version} ({self.answered_by}), trained on "
                f"`{self.trained_on}` weather, fed "
                f"`{peak.weather_source}`. Each P with its band: {BAND_MEANING}.",
                "",
                "| push day | team: expected summiters | "
                + " | ".join(m.name for m in self.members)
                + " |",
                "| --- | ---: |" + " ---: |" * len(self.members),
            ]
            for day in peak.days:
                mark = " **best**" if day == best else ""
                members = " | ".join(f"{p:.2f} [{lo:.2f}–{hi:.2f}]" for p, lo, hi in day.members)
                lines.append(
                    f"| {day.day}{mark} | {day.expected:.2f} [{day.low:.2f}–{day.high:.2f}] "
                    f"| {members} |"
                )
            lines += ["", *(f"- {note}" for note in peak.notes), ""]
        if self.drift and self.drift.warning():
            lines += [f"**Input drift:** {self.drift.warning()}", ""]
        if self.chart is not None and self.chart.exists():
            encoded = base64.b64encode(self.chart.read_bytes()).decode()
            lines.append(f"![{OUTLOOK_CHART_ALT}](data:image/png;base64,{encoded})")
        return "\n".join(lines)


# The weather source of a peak answered without weather (outlook.without_weather).
NO_WEATHER_SOURCE = "none"


def candidate_days(first: dt.date, days: int) -> list[dt.date]:
    return [first + dt.timedelta(days=offset) for offset in range(days)]


def planned_requests(
    config: OutlookConfig,
    members: tuple[TeamMember, ...],
    peakid: str,
    days: list[dt.date],
    daily: pl.DataFrame | None,
    source: str,
) -> pd.DataFrame:
    """One planned attempt per (day, member) in the model's input layout, each with its 90
    days of weather from `daily` (None: no weather at all, which the model reads as absent)."""
    absent = pl.DataFrame(schema={"date": pl.Date, **dict.fromkeys(WEATHER_VARIABLES, pl.Float64)})
    by_date = absent if daily is None else daily.select("date", *WEATHER_VARIABLES)
    plan = {**config.plan(), "team_size": config.team_size or len(members)}
    stated = {name: value for name, value in plan.items() if value is not None}
    rows = []
    for day in days:
        first = day - dt.timedelta(days=WINDOW_DAYS - 1)
        window = pl.DataFrame({"date": pl.date_range(first, day, eager=True)}).join(
            by_date, on="date", how="left"
        )
        weather = {name: window[name].to_list() for name in WEATHER_VARIABLES}
        for member in members:
            attempt = {
                "peak": peakid,
                "push_date": day,
                "weather_source": source,
                **member.model_dump(exclude={"name"}, exclude_none=True),
                **stated,
            }
            rows.append({**planned_record(attempt), **weather})
    return planned_frame(rows)


def check_horizon(
    peakid: str, days: list[dt.date], daily: pl.DataFrame, source: str, replay: bool = False
) -> None:
    """Every candidate day's whole window lies in the stored forecast (or, for a replay, the
    stored past weather); else one line."""
    stored = f"the stored weather of {source}" if replay else f"the forecast {source}"
    if daily.is_empty():
        raise BadInput(
            f"{peakid}: no weather of {source!r} stored for the windows of {days[0]} … {days[-1]}"
        )
    first, last = daily["date"].min(), daily["date"].max()
    if days[-1] > last:
        horizon = stored if replay else "the forecast horizon"
        raise BadInput(
            f"{peakid}: push day {days[-1]} is beyond {horizon} ({last}, {source}); "
            f"the last candidate day can be {last}"
        )
    needed = days[0] - dt.timedelta(days=WINDOW_DAYS - 1)
    if needed < first:
        raise BadInput(
            f"{peakid}: push day {days[0]} needs weather from {needed}; {stored} starts "
            f"{first} (the first candidate day can be "
            f"{first + dt.timedelta(days=WINDOW_DAYS - 1)})"
        )


def outlook_for(
    model: Any,
    config: OutlookConfig,
    members: tuple[TeamMember, ...],
    peakid: str,
    first_day: dt.date,
    daily: pl.DataFrame | None,
    source: str,
) -> tuple[PeakOutlook, pd.DataFrame]:
    """One peak's outlook from its forecast rows (`daily`) by `model` (the pyfunc), and the
    requests it scored. `daily` None: the plan's P without weather on every day, `source`
    saying why there is none."""
    days = candidate_days(first_day, config.days)
    if daily is not None:
        check_horizon(peakid, days, daily, source, replay=config.as_of is not None)
    requests = planned_requests(config, members, peakid, days, daily, source)
    try:
        answers = model.predict(requests)
    except RefusedRequest as refused:
        raise BadInput(f"{peakid}: {min(refused.reasons.values())}") from None
    shape = (len(days), len(members))
    p, low, high = (
        answers[column].to_numpy(dtype=np.float64).reshape(shape)
        for column in ("probability", "probability_low", "probability_high")
    )
    notes = {n.strip() for note in answers["notes"] if note for n in note.split(";")}
    if daily is None:
        notes.add(source)
    outlook = PeakOutlook(
        peakid=peakid,
        weather_source=source if daily is not None else NO_WEATHER_SOURCE,
        days=tuple(
            DayOutlook(
                day=day,
                members=tuple(
                    (float(a), float(b), float(c))
                    for a, b, c in zip(p[i], low[i], high[i], strict=True)
                ),
                expected=float(p[i].sum()),
                low=float(low[i].sum()),
                high=float(high[i].sum()),
            )
            for i, day in enumerate(days)
        ),
        notes=tuple(sorted(n for n in notes if n)),
    )
    return outlook, requests


def forecast_drift(
    settings: Settings, artifact: ModelArtifact, requests: pd.DataFrame
) -> DriftReport | None:
    """The weather of the outlook's windows against the champion's training rows of the same
    season and weeks: how far it is from the weather the model learnt from at that time of
    year; None when the champion keeps no such rows. (The team's own inputs are one
    expedition, a point against a population: not compared.)"""
    planned = parse_planned(requests)
    features, windows = planned_features(artifact, planned, list(planned.errors))
    return weather_drift(
        artifact.drift_reference,
        features.with_columns(peakid=pl.col("window_id")),  # each row's own window
        windows,
        settings.drift,
        f"the outlook's weather ({', '.join(features['peakid'].unique().sort())}: "
        f"{len(requests)} planned attempts)",
    )


def score_outlook(
    settings: Settings,
    context: RunContext,
    first_day: dt.date,
    weather: dict[str, tuple[pl.DataFrame | None, str]],
) -> OutlookReport:
    """Each peak's outlook by the champion from its daily weather (peak → (rows, source), or
    (None, why there is none) for a peak answered without weather), with the drift of the
    weather it was fed and the chart."""
    members = team(settings.outlook)
    champion = champion_version(settings.mlflow)
    version = str(champion.version)
    model = load_verified(
        settings.mlflow.tracking_uri, champion.name, version, settings.mlflow.model_cache_dir
    )
    artifact: ModelArtifact = model.unwrap_python_model().artifact
    peaks, fed = [], []  # fed: the requests that carried weather, the drift's rows
    for peakid, (daily, source) in weather.items():
        peak, asked = outlook_for(
            model, settings.outlook, members, peakid, first_day, daily, source
        )
        peaks.append(peak)
        if daily is not None:
            fed.append(asked)
    return OutlookReport(
        members=members,
        peaks=tuple(peaks),
        model_version=version,
        trained_on=champion.tags.get(TAG_WEATHER_SOURCE, artifact.preprocessor.weather_source),
        answered_by=artifact.parts,
        drift=forecast_drift(settings, artifact, pd.concat(fed, ignore_index=True))
        if fed
        else None,
    )


def outlook_rows(report: OutlookReport) -> pl.DataFrame:
    """The report as rows of the outlooks table: per peak, push day and member, and the team.
    The table keeps forecast outlooks: a peak answered without weather is not one."""
    records = []
    for peak in (p for p in report.peaks if p.weather_source != NO_WEATHER_SOURCE):
        issued = issued_at(peak.weather_source)
        for day in peak.days:
            named = zip((m.name for m in report.members), day.members, strict=True)
            for member, (p, low, high) in (*named, (TEAM, (day.expected, day.low, day.high))):
                records.append(
                    {
                        "peakid": peak.peakid,
                        "issued_at": issued,
                        "push_day": day.day,
                        "member": member,
                        "probability": p,
                        "band_low": low,
                        "band_high": high,
                        "model_version": report.model_version,
                        "weather_source": peak.weather_source,
                    }
                )
    return pl.DataFrame(records).with_columns(pl.col("issued_at").cast(pl.Datetime("us")))


def write_outlooks(settings: Settings, report: OutlookReport) -> int:
    """Upsert the report into `outlooks` (deepsummit/sql/outlook_upsert.sql): the same forecast,
    model and team again replaces its rows, never duplicates them."""
    if all(peak.weather_source == NO_WEATHER_SOURCE for peak in report.peaks):
        return 0
    frame = outlook_rows(report)
    with connect(settings.paths.warehouse, lock_timeout_s=settings.warehouse.lock_timeout_s) as con:
        run(con, "outlook_create_table")
        with registered(con, outlook_batch=frame):
            run(con, "outlook_upsert")
    return frame.height
