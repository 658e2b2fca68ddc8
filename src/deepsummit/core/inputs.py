"""The one place that names the model's inputs, and when each becomes known.

DeepSummit answers "if this member starts the summit push on day D, what is P(summit)?", asked
before D. Every input is declared here with the moment it is known: before departure, on arrival
at base camp, at the push decision (day D: the weather up to D, history plus forecast), or after
the climb. An input known only after the climb never enters a decision-time model; the
`retrospective` profile may use one, for analysis, and registers under its own name.

The model spec's 20 tabular tokens are marked `spec=True`; the others are a documented,
configurable extension (`features.extra_inputs`). Every other module (SQL, arrays, validation,
the model config, serving) derives its lists and counts from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Literal


class Known(Enum):
    """When a value is known, in the order a climbing season runs."""

    BEFORE_DEPARTURE = "before departure"
    AT_BASE_CAMP = "on arrival at base camp"
    AT_PUSH = "at the push decision (day D)"
    AFTER_CLIMB = "after the climb"


Kind = Literal["numeric", "categorical", "binary"]


@dataclass(frozen=True)
class ModelInput:
    name: str
    kind: Kind
    known: Known
    source: str  # where the value comes from, for a person reading the table
    spec: bool = False  # one of the model spec's 20 tabular tokens


BD, BC, PUSH, AFTER = Known.BEFORE_DEPARTURE, Known.AT_BASE_CAMP, Known.AT_PUSH, Known.AFTER_CLIMB
# Within a kind, the spec's tokens come first, in the spec's order.
TABULAR_INPUTS: tuple[ModelInput, ...] = (
    ModelInput("age", "numeric", BD, "members.age", spec=True),
    ModelInput(
        "prior_expeditions", "numeric", BD, "the climber's earlier expeditions (HDB export)", True
    ),
    ModelInput("prior_summits", "numeric", BD, "the climber's earlier summits (HDB export)", True),
    ModelInput(
        "highest_prev_altitude_m", "numeric", BD, "the climber's earlier high points", spec=True
    ),
    ModelInput("totmembers", "numeric", BD, "expeditions.totmembers (0 = not recorded)", True),
    ModelInput("heightm", "numeric", BD, "peaks.heightm", spec=True),
    ModelInput(
        "route_success_rate",
        "numeric",
        BD,
        "climbing members' summits on the route, earlier seasons",
        True,
    ),
    ModelInput(
        "peak_success_rate",
        "numeric",
        BD,
        "climbing members' summits on the peak, earlier seasons",
        True,
    ),
    ModelInput("staff_per_member", "numeric", BD, "expedition details: hired_staff / members"),
    ModelInput("days_at_base_camp", "numeric", PUSH, "D − expedition details' basecamp_date"),
    ModelInput(
        "agency_success_rate",
        "numeric",
        BD,
        "climbing members' summits with the agency, earlier seasons",
    ),
    ModelInput("day_of_year", "numeric", PUSH, "the push day D's day of the year"),
    ModelInput("days_in_season", "numeric", PUSH, "D − the season's opening (Spring: 1 March …)"),
    ModelInput("nationality", "categorical", BD, "members.citizenship", spec=True),
    ModelInput("route1", "categorical", BD, "expeditions.route1", spec=True),
    ModelInput("himal", "categorical", BD, "peaks.himal", spec=True),
    ModelInput("season", "categorical", BD, "expeditions.season", spec=True),
    ModelInput("style", "categorical", BD, "expeditions.style", spec=True),
    ModelInput("peakid", "categorical", BD, "expeditions.peakid", spec=True),
    ModelInput("agency", "categorical", BD, "expedition details' trekking_agency"),
    ModelInput("team_role", "categorical", BD, "members.status: Leader, Climber, Exp Doctor …"),
    ModelInput("sex", "binary", BD, "members.sex", spec=True),
    # The records say who *used* oxygen, not who planned to: the plan is the expedition's, and
    # its training proxy is expeditions.o2used ("a member used oxygen"), which depends on the
    # outcome far less than a member's own flag (a climber who turned back before starting
    # oxygen is recorded as not using it). At predict time the user states the plan.
    ModelInput("oxygen_planned", "binary", BD, "the expedition's plan; trained on o2used", True),
    ModelInput("is_hired", "binary", BD, "members.hired", spec=True),
    ModelInput("is_sherpa", "binary", BD, "hired and Nepali citizenship", spec=True),
    ModelInput("is_commercial", "binary", BD, "expeditions.commercial", spec=True),
    ModelInput("o2_available", "binary", BD, "the expedition's plan; trained on o2used", True),
    # Recorded after the climb: the retrospective profile's reference, never a decision input.
    ModelInput("oxygen_used", "binary", AFTER, "members.oxygen_used (who got high used it)"),
)
INPUTS_BY_NAME: dict[str, ModelInput] = {i.name: i for i in TABULAR_INPUTS}
SPEC_INPUTS: tuple[str, ...] = tuple(i.name for i in TABULAR_INPUTS if i.spec)


@dataclass(frozen=True)
class InputSet:
    """The tabular inputs one model uses, by kind, in token order."""

    numeric: tuple[str, ...]
    categorical: tuple[str, ...]
    binary: tuple[str, ...]

    @classmethod
    def of(cls, names: tuple[str, ...] | list[str]) -> InputSet:
        """The declared inputs among `names`, in declaration order (unknown names are errors)."""
        unknown = [n for n in names if n not in INPUTS_BY_NAME]
        if unknown:
            raise ValueError(f"unknown model input(s) {unknown}; declared: {list(INPUTS_BY_NAME)}")
        chosen = [i for i in TABULAR_INPUTS if i.name in set(names)]
        kinds = ("numeric", "categorical", "binary")
        return cls(*(tuple(i.name for i in chosen if i.kind == kind) for kind in kinds))

    @property
    def names(self) -> tuple[str, ...]:
        return (*self.numeric, *self.categorical, *self.binary)

    @property
    def tokens(self) -> int:
        return len(self.names)

    @property
    def latest_known(self) -> Known:
        """The moment every input of the set is known (the weather: at the push decision)."""
        order = list(Known)
        return max((INPUTS_BY_NAME[n].known for n in self.names), key=order.index, default=PUSH)


SPEC_INPUT_SET = InputSet.of(SPEC_INPUTS)
# Where the push day falls in the calendar: a planned day outside the range the training rows
# cover (a day outside every season the model learnt) is answered with a note saying so.
CALENDAR_INPUTS: tuple[str, ...] = ("day_of_year", "days_in_season")

# A categorical input whose rare values fold into a broader shared token, and the column of the
# features table (sql/features_tabular.sql) that names that token: a rarely climbed peak reads
# as "a rare peak of its height band", beside its own himal and height tokens.
RARE_FOLDS: dict[str, str] = {"peakid": "height_band"}


# The 15 Open-Meteo daily variables, as stored in weather_daily.
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
# A direction is an angle: 359° and 1° are neighbours. It reaches the model as the sine and
# cosine of each token's mean direction vector (mean of sin, mean of cos), never as degrees.
DIRECTION_VARIABLE = "wind_direction_10m_dominant"
DIRECTION_CHANNELS: tuple[str, str] = ("wind_direction_sin", "wind_direction_cos")
# The weather token's feature axis: the 14 other variables, then the direction's two channels.
WEATHER_CHANNELS: tuple[str, ...] = (
    *(v for v in WEATHER_VARIABLES if v != DIRECTION_VARIABLE),
    *DIRECTION_CHANNELS,
)

# Columns that describe an outcome; none of them may ever become a decision-time input.
OUTCOME_COLUMNS: frozenset[str] = frozenset(
    {
        "success",
        "smtmembers",
        "termreason",
        "termination_reason",
        "termination_date",
        "highpoint",
        "highpoint_metres",
        "highpoint_date",
        "died",
        "death_cause",
        "death_height_metres",
        "member_deaths",
        "hired_staff_deaths",
        "injured",
        "injury_type",
        "injury_height_metres",
        "smtdays",
        "mdeaths",
        "hdeaths",
        "oxygen_used",
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
