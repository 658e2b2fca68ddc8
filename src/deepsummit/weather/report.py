"""What a weather load did: per peak days stored, requests, weighted calls, what is missing."""

from __future__ import annotations

from dataclasses import dataclass

from deepsummit.weather.needs import SkippedPeak


@dataclass(frozen=True)
class PeakWeather:
    peakid: str
    stored_days: int  # rows of this source in weather_daily for the peak
    needed_days: int  # days the peak's attempt windows need
    missing_days: int  # needed, not stored, and a rerun could still fetch them
    quarantined_days: int  # needed, not stored: the source gave values the store rejected
    before_first_date: int  # needed days before ERA5 starts: no source has them
    requests: int  # HTTP requests sent this run (a multi-location request counts for each)
    weighted_calls: float  # this peak's share of Open-Meteo's weighted calls this run


@dataclass(frozen=True)
class WeatherReport:
    source: str
    peaks: tuple[PeakWeather, ...]
    skipped: tuple[SkippedPeak, ...]
    requests: int  # HTTP requests sent this run
    weighted_calls: float
    fetched: int  # rows the source gave this run: stored + quarantined + rejected_rows
    stored: int  # rows written this run (upserts)
    quarantined: int
    rejected_rows: int  # rows of locations answered without values; not stored
    # One line per response, or location of one, that did not answer its request; not stored.
    rejected: tuple[str, ...]
    stopped: str | None  # why the run stopped early (daily limit), None if it did not
    rows: int  # rows of weather_daily (all sources), for asset metadata
    digest: str  # content digest of weather_daily without fetched_at / request_id
    table: str = "weather_daily"

    @property
    def missing_days(self) -> int:
        return sum(peak.missing_days for peak in self.peaks)

    @property
    def quarantined_days(self) -> int:
        return sum(peak.quarantined_days for peak in self.peaks)

    @property
    def complete(self) -> bool:
        """Nothing a rerun could still add: no early stop, no rejected answer, no day that
        the source could give still missing (archive: days outside the file don't count).
        Quarantined days are not missing: the source answered, with values that are kept out
        (and asked again next run, since their cached response is dropped)."""
        if self.stopped or self.rejected:
            return False
        return self.source == "archive" or self.missing_days == 0

    @property
    def problem(self) -> str | None:
        """Why this load is not the stage's result yet (a retry fetches only what is missing),
        or None when it is complete."""
        if self.complete:
            return None
        return (
            f"{len(self.rejected)} answers rejected, {self.missing_days:,} needed days "
            "missing; a retry fetches only what is missing"
        )

    def render(self) -> str:
        lines = [
            f"weather source: {self.source}",
            "",
            "| peak | days stored | needed | missing | quarantined | before 1940 | requests "
            "| weighted calls |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        shown = [p for p in self.peaks if p.stored_days or p.requests or p.missing_days == 0]
        for p in shown:
            lines.append(
                f"| {p.peakid} | {p.stored_days:,} | {p.needed_days:,} | {p.missing_days:,} | "
                f"{p.quarantined_days:,} | {p.before_first_date:,} | {p.requests:,} | "
                f"{p.weighted_calls:,.1f} |"
            )
        lines.append(
            f"| total | {sum(p.stored_days for p in self.peaks):,} | "
            f"{sum(p.needed_days for p in self.peaks):,} | {self.missing_days:,} | "
            f"{self.quarantined_days:,} | {sum(p.before_first_date for p in self.peaks):,} | "
            f"{self.requests:,} | {self.weighted_calls:,.1f} |"
        )
        unserved = [p for p in self.peaks if p not in shown]
        if unserved:
            lines.append(
                f"{len(unserved)} more peaks need {sum(p.needed_days for p in unserved):,} days "
                f"that this source has none of ({', '.join(p.peakid for p in unserved)})"
            )
        if self.skipped:
            lines.append("")
            for reason in sorted({s.reason for s in self.skipped}):
                group = [s for s in self.skipped if s.reason == reason]
                lines.append(
                    f"skipped, {reason}: {len(group)} peaks, "
                    f"{sum(s.attempt_dates for s in group):,} attempt dates "
                    f"({', '.join(s.peakid for s in group)})"
                )
        lines.append("")
        lines.append(
            f"fetched {self.fetched:,} rows this run: stored {self.stored:,}, quarantined "
            f"{self.quarantined:,}, rejected {self.rejected_rows:,}; weather_daily: "
            f"{self.rows:,} rows, digest {self.digest[:12]}"
        )
        lines += [f"rejected: {reason}" for reason in self.rejected]
        if self.stopped:
            lines.append(
                f"stopped early: {self.stopped}; the next run fetches only what is missing"
            )
        lines.append("complete" if self.complete else "INCOMPLETE: run again to fetch the rest")
        return "\n".join(lines)
