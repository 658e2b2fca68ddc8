"""The one place that names the model's inputs: tabular features, weather variables, window scales.

Every other module (SQL rendering, dataset arrays, validation, the model config) derives its
lists and counts from here, so adding a feature is a one-line change.
"""

from __future__ import annotations

from dataclasses import dataclass

# Tabular tokens (20), in token order (../shared/DESIGN.md, "Tabular tokens").
NUMERIC_FEATURES: tuple[str, ...] = (
    "age",
    "prior_expeditions",
    "prior_summits",
    "highest_prev_altitude_m",
    "totmembers",
    "heightm",
    "route_success_rate",
    "peak_success_rate",
)
CATEGORICAL_FEATURES: tuple[str, ...] = (
    "nationality",
    "route1",
    "himal",
    "season",
    "style",
    "peakid",
)
BINARY_FEATURES: tuple[str, ...] = (
    "sex",
    "oxygen_planned",
    "is_hired",
    "is_sherpa",
    "is_commercial",
    "o2_available",
)

# The 15 Open-Meteo daily variables, in the order of the weather token's feature axis.
WEATHER_VARIABLES: tuple[str, ...] = (
    "temperature_2m_mean",
    "temperature_2m_max",
    "temperature_2m_min",
    "apparent_temperature_mean",
    "apparent_temperature_max",
    "apparent_temperature_min",
    "precipitation_sum",
    "rain_sum",
    "snowfall_sum",
    "precipitation_hours",
    "wind_speed_10m_max",
    "wind_gusts_10m_max",
    "wind_direction_10m_dominant",
    "shortwave_radiation_sum",
    "et0_fao_evapotranspiration",
)
# Averaged on the circle (atan2 of mean sin/cos), never arithmetically.
CIRCULAR_WEATHER_VARIABLES: frozenset[str] = frozenset({"wind_direction_10m_dominant"})

# Columns that describe an outcome; none of them may ever become a feature. (Oxygen use is
# not here: the records give it as the plan, and it becomes oxygen_planned / o2_available.)
OUTCOME_COLUMNS: frozenset[str] = frozenset(
    {
        "success",
        "smtmembers",
        "termreason",
        "highpoint",
        "highpoint_metres",
        "died",
        "death_cause",
        "death_height_metres",
        "injured",
        "injury_type",
        "injury_height_metres",
        "smtdays",
        "mdeaths",
        "hdeaths",
    }
)


@dataclass(frozen=True)
class WindowScale:
    """One weather scale: `tokens` buckets of `days_per_token` days ending on the attempt date."""

    name: str
    modality_id: int
    tokens: int
    days_per_token: int

    @property
    def span_days(self) -> int:
        return self.tokens * self.days_per_token


# Spec order: 7 daily (D-6..D), 10 three-day means (D-29..D), 9 ten-day means (D-89..D).
WINDOW_SCALES: tuple[WindowScale, ...] = (
    WindowScale("daily", modality_id=2, tokens=7, days_per_token=1),
    WindowScale("three_day", modality_id=3, tokens=10, days_per_token=3),
    WindowScale("ten_day", modality_id=4, tokens=9, days_per_token=10),
)
WEATHER_TOKENS: int = sum(scale.tokens for scale in WINDOW_SCALES)  # 26
WINDOW_DAYS: int = max(scale.span_days for scale in WINDOW_SCALES)  # 90
TABULAR_TOKENS: int = len(NUMERIC_FEATURES) + len(CATEGORICAL_FEATURES) + len(BINARY_FEATURES)  # 20
