"""The weather sections of the settings: the Open-Meteo archive and forecast APIs, their free
tier's limits, and the bundled archive (deepsummit/core/sections.py holds the others and what a
section is)."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from deepsummit.core.inputs import WEATHER_VARIABLES
from deepsummit.core.sections import ProjectPath, Section


class RateLimits(Section):
    """Open-Meteo free tier, in weighted calls (variables/10 × days/14 per location)."""

    per_minute: float = 600
    per_hour: float = 5_000
    per_day: float = 10_000


class WeatherConfig(Section):
    OPERATIONAL = frozenset(
        {"cache_path", "timeout_s", "retries", "backoff_factor", "backoff_max_s", "limits"}
    )

    source: Literal["archive", "open-meteo"] = "archive"
    archive_path: str = "weather/era5_daily.parquet"
    api_url: str = "https://archive-api.open-meteo.com/v1/archive"
    weather_model: str = "era5"
    timezone: str = "Asia/Kathmandu"
    # "peak" = the peak's height from the records; a number = that elevation in metres for all.
    elevation: Literal["peak"] | float = "peak"
    cache_path: ProjectPath = Path("var/cache/open-meteo")
    timeout_s: float = 30.0
    retries: int = 5
    backoff_factor: float = 0.5
    backoff_max_s: float = 120.0  # cap on one wait, whether backoff or the server's Retry-After
    max_locations_per_request: int = 10
    # Peaks share one request when their spans' union costs at most this fraction more weighted
    # calls than separate requests (0 = only when merging is free, e.g. identical spans).
    max_merge_overhead: float = 0.0
    first_date: date = date(1940, 1, 1)  # ERA5 starts here; earlier days are never requested
    # Variables an answer may leave without a value on every day of a peak's request: the
    # bundled archive has none of these (data README §4), so the model trained on it never
    # reads them. Any other variable without a value, or no value at all, rejects the answer.
    optional_variables: tuple[str, ...] = (
        "precipitation_hours",
        "shortwave_radiation_sum",
        "et0_fao_evapotranspiration",
    )
    limits: RateLimits = Field(default_factory=RateLimits)

    @model_validator(mode="after")
    def _known_variables(self) -> WeatherConfig:
        unknown = sorted(set(self.optional_variables) - set(WEATHER_VARIABLES))
        if unknown:
            raise ValueError(f"optional_variables: {', '.join(unknown)} not a weather variable")
        return self


class ForecastConfig(Section):
    """The Open-Meteo forecast API: weather for days that have not happened yet. Its requests
    share `weather.limits` (the free tier counts calls per client, whatever the endpoint)."""

    OPERATIONAL = frozenset({"cache_path", "cache_expire_s"})

    api_url: str = "https://api.open-meteo.com/v1/forecast"
    past_days: int = Field(92, ge=0, le=92)  # Open-Meteo's limits: a request covers the whole
    forecast_days: int = Field(16, ge=1, le=16)  # 90-day window and two weeks ahead
    cache_path: ProjectPath = Path("var/cache/open-meteo-forecast")
    # Open-Meteo's forecast models run every hour or more: an hour-old answer is this run's.
    cache_expire_s: int = 3600
