"""One typed configuration for the whole pipeline, with named profiles.

Precedence, lowest to highest: the defaults below, the `[settings]` table of the config file
(`deepsummit.toml`, shipped in this package, or the file named by `DEEPSUMMIT_CONFIG`), the
`[profiles.<name>]` table of that file for the selected profile, environment variables
(`DEEPSUMMIT_<SECTION>__<FIELD>`, e.g. `DEEPSUMMIT_TRAIN__MAX_EPOCHS=3`), and explicit overrides
passed to `load_settings` (what the CLI options set).

Relative paths are resolved against the project folder, so the CLI, the tests and the Prefect
workers share one warehouse and one data bundle by default. The project folder is
`DEEPSUMMIT_PROJECT_DIR` when set (the deployments set it for their workers), else the source
checkout this package is installed from (an editable install), else the working directory (an
installed wheel).
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from datetime import date
from importlib.resources import files
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from deepsummit.core.inputs import INPUTS_BY_NAME, SPEC_INPUTS, InputSet, Known
from deepsummit.core.planned import Scope, fields_of
from deepsummit.model.config import ModelConfig

PROJECT_DIR_VARIABLE = "DEEPSUMMIT_PROJECT_DIR"


def project_root() -> Path:
    """Where relative settings paths point (see the module docstring)."""
    if os.environ.get(PROJECT_DIR_VARIABLE):
        return Path(os.environ[PROJECT_DIR_VARIABLE]).resolve()
    checkout = Path(__file__).resolve().parents[3]  # <checkout>/src/deepsummit/core/config.py
    if (checkout / "pyproject.toml").exists() and (checkout / "src" / "deepsummit").is_dir():
        return checkout
    return Path.cwd()


PROJECT_ROOT = project_root()
DEFAULT_CONFIG_FILE = Path(str(files("deepsummit") / "deepsummit.toml"))


def known_after_climb(name: str) -> bool:
    return INPUTS_BY_NAME[name].known is Known.AFTER_CLIMB


def resolve_path(value: str | Path) -> Path:
    """A path from config: absolute as given, relative to the project root otherwise."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else (PROJECT_ROOT / path).resolve()


def is_url(location: str) -> bool:
    return location.startswith(("http://", "https://"))


class Section(BaseModel):
    """A settings section: a misspelt key is an error, never silently ignored."""

    model_config = ConfigDict(extra="forbid")

    # Fields that change how a stage runs (where it caches, how long it waits), never what it
    # produces: the stages' cache keys leave them out.
    OPERATIONAL: ClassVar[frozenset[str]] = frozenset()

    def result_settings(self) -> dict[str, Any]:
        """The section as JSON, without its operational fields: what a cache key records."""
        return self.model_dump(mode="json", exclude=set(self.OPERATIONAL))


class PathsConfig(Section):
    data_dir: Path = Path("../shared/data")
    var_dir: Path = Path("var")  # warehouse, run folders, caches, service state; never committed
    warehouse: Path = Path("var/warehouse.duckdb")
    runs_dir: Path = Path("var/runs")

    @model_validator(mode="after")
    def _absolute(self) -> PathsConfig:
        for name in ("data_dir", "var_dir", "warehouse", "runs_dir"):
            setattr(self, name, resolve_path(getattr(self, name)))
        return self


class WarehouseConfig(Section):
    OPERATIONAL = frozenset({"lock_timeout_s"})

    # DuckDB lets one process write the file at a time (readers from other processes wait too).
    # A connection waits this long for another process's lock, then fails with one line that
    # names the holder; an ingest of the bundle holds it for well under a minute.
    lock_timeout_s: float = 120.0


class IngestConfig(Section):
    """Guards against a source that parses but lost rows (a truncated download)."""

    OPERATIONAL = frozenset({"allow_shrink"})

    # A load that leaves a clean table with fewer rows than it holds now, by more than this
    # share, is refused and changes nothing: the records only grow between releases.
    max_shrink: float = 0.05
    # Accept such a load anyway, once (`deepsummit ingest --allow-shrink`): the source is
    # smaller on purpose (a slice, another export).
    allow_shrink: bool = False


class SourcesConfig(Section):
    """Himalayan Database inputs: file paths (relative to the data dir) or http(s) URLs."""

    members: str = "himalayan/members.csv.gz"
    expeditions: str = "himalayan/expeditions.csv"
    peaks: str = "himalayan/peaks.csv"
    # The TidyTuesday expeditions layout: base-camp date, agency, team and staff counts (what
    # operators know before the push). None = not used: the expedition_details table is empty.
    expedition_details: str | None = "himalayan/expeditions_tidytuesday.csv.gz"
    # Native HDB export (folder or file with uppercase columns, CSV or DBF); None = not used.
    hdb_members: str | None = None
    hdb_expeditions: str | None = None


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
    cache_path: Path = Path("var/cache/open-meteo")
    timeout_s: float = 30.0
    retries: int = 5
    backoff_factor: float = 0.5
    backoff_max_s: float = 120.0  # cap on one wait, whether backoff or the server's Retry-After
    max_locations_per_request: int = 10
    # Peaks share one request when their spans' union costs at most this fraction more weighted
    # calls than separate requests (0 = only when merging is free, e.g. identical spans).
    max_merge_overhead: float = 0.0
    first_date: date = date(1940, 1, 1)  # ERA5 starts here; earlier days are never requested
    limits: RateLimits = Field(default_factory=RateLimits)

    @model_validator(mode="after")
    def _absolute(self) -> WeatherConfig:
        self.cache_path = resolve_path(self.cache_path)
        return self


class ForecastConfig(Section):
    """The Open-Meteo forecast API: weather for days that have not happened yet. Its requests
    share `weather.limits` (the free tier counts calls per client, whatever the endpoint)."""

    OPERATIONAL = frozenset({"cache_path", "cache_expire_s"})

    api_url: str = "https://api.open-meteo.com/v1/forecast"
    past_days: int = Field(92, ge=0, le=92)  # Open-Meteo's limits: a request covers the whole
    forecast_days: int = Field(16, ge=1, le=16)  # 90-day window and two weeks ahead
    cache_path: Path = Path("var/cache/open-meteo-forecast")
    # Open-Meteo's forecast models run every hour or more: an hour-old answer is this run's.
    cache_expire_s: int = 3600

    @model_validator(mode="after")
    def _absolute(self) -> ForecastConfig:
        self.cache_path = resolve_path(self.cache_path)
        return self


def planned_settings(scope: Scope) -> dict[str, Any]:
    """The planned-attempt fields of `scope` (deepsummit/core/planned.py) as optional settings,
    at their declared defaults: stated once, for the model, the CLI and these settings."""
    return {
        f.name: (f.python_type | None, Field(f.default, description=f.help))
        for f in fields_of(scope)
    }


# One member of the team an outlook is for: a name, and the member fields of a planned attempt
# (a blank one is missing, never made up).
TeamMember = create_model(
    "TeamMember", __base__=Section, name=(str, ...), **planned_settings("member")
)
# The expedition's plan, as for `deepsummit predict`: the plan fields of a planned attempt;
# None = not stated (the model sees it as missing). team_size None = the number of members.
OutlookPlan = create_model("OutlookPlan", __base__=Section, **planned_settings("plan"))


class OutlookConfig(OutlookPlan):  # type: ignore[misc, valid-type]
    """The push-day outlook (deepsummit/serve/outlook.py): which peaks, which days, which team,
    and the expedition's plan."""

    peaks: tuple[str, ...] = ("EVER",)
    first_day: date | None = None  # the first candidate push day; None = today in Nepal
    # A replay (`summit/outlook` and `deepsummit outlook --as-of`): the outlook of that morning
    # from the stored weather of weather.source, the candidate days starting on it.
    as_of: date | None = None
    days: int = Field(16, ge=1, le=16)  # candidate days; the forecast reaches 16 days ahead
    # A peak without trusted coordinates has no forecast, so no day-by-day outlook: by default
    # it is an error; with this set, it gets the plan's P without weather on every day.
    without_weather: bool = False
    # The members, stated here or in a CSV file (a header of TeamMember's fields; one row per
    # member); `team` wins when both are set.
    team: tuple[TeamMember, ...] = ()  # type: ignore[valid-type]
    team_file: Path = Path("deployments/outlook-team.csv")

    @model_validator(mode="after")
    def _absolute(self) -> OutlookConfig:
        self.team_file = resolve_path(self.team_file)
        return self

    def plan(self) -> dict[str, Any]:
        """The plan fields as stated (None = not stated)."""
        return {name: getattr(self, name) for name in OutlookPlan.model_fields}


@dataclass(frozen=True)
class SplitYears:
    """The last expedition year of each split: train ≤ train_until < validation ≤
    validation_until < test ≤ test_until."""

    train_until: int
    validation_until: int
    test_until: int

    def describe(self) -> dict[str, str]:
        return {
            "train": f"<= {self.train_until}",
            "validation": f"{self.train_until + 1}-{self.validation_until}",
            "test": f"{self.validation_until + 1}-{self.test_until}",
        }


class SplitConfig(Section):
    """Time split by expedition year; whole expeditions fall on one side. Validation and test are
    the newest seasons, counted back from the newest year with a dated record, so the split moves
    on as the records do: test = the newest `test_years`, validation the `validation_years`
    before them, train everything older. Each bound may be pinned to a year instead (a replay of
    an earlier state, a test slice); the ones below it are then counted back from it."""

    validation_years: int = Field(2, ge=1)
    test_years: int = Field(3, ge=1)
    train_until: int | None = None
    validation_until: int | None = None
    test_until: int | None = None

    def years(self, newest: int) -> SplitYears:
        """The split's years when the records' newest dated year is `newest`."""
        test_until = self.test_until or newest
        validation_until = self.validation_until or test_until - self.test_years
        train_until = self.train_until or validation_until - self.validation_years
        return SplitYears(train_until, validation_until, test_until)


class BacktestConfig(Section):
    """How models are judged out of time. The rolling-origin backtest (deepsummit/backtest/)
    answers each test year Y from `first_test_year` to `last_test_year` (None: the newest year
    of the records) with every model as it is served: trained on every season before Y, the
    transformer through the map of its member check (`train.member_check_years`), every model
    on identical rows. The train stage's evaluation reads the same thresholds."""

    first_test_year: int = 2008
    last_test_year: int | None = None
    # A season of member rows with fewer rows (or one class only) is listed but not scored; so
    # is a season of expedition records with fewer expeditions.
    min_season_rows: int = 100
    min_season_expeditions: int = 30
    # Scored and shown with a note, left out of the ordinary mean: they must not decide the
    # model alone.
    disaster_seasons: tuple[str, ...] = ("2014 Spring", "2015 Spring")
    # Listed, not scored, with the reason.
    unscored_seasons: dict[str, str] = Field(
        default_factory=lambda: {"2020 Spring": "the pandemic", "2020 Autumn": "the pandemic"}
    )
    # Calibration by member group (deepsummit/train/member_groups.py): groups of fewer members
    # are listed, not counted in the group error; the peaks with the most members are also
    # reported on their own.
    min_group_members: int = 50
    separate_peaks: int = 3
    # Push-day skill: held-out peak-seasons with at least this many summiters.
    push_day_min_summiters: int = 30
    output_dir: Path = Path("var/backtest")

    @model_validator(mode="after")
    def _absolute(self) -> BacktestConfig:
        self.output_dir = resolve_path(self.output_dir)
        return self


class FeaturesConfig(Section):
    split: SplitConfig = Field(default_factory=SplitConfig)
    # Tabular inputs beyond the model spec's 20 tokens, by name (deepsummit/core/inputs.py
    # declares each one and when it is known); bench/ablation.py measures what each is worth.
    extra_inputs: tuple[str, ...] = ()
    # Allow inputs known only after the climb. For analysis only: the `retrospective` profile,
    # which registers its models under their own name, never the decision-time champion.
    retrospective: bool = False
    max_missing_days: int = 0  # a window missing more days than this is excluded
    min_category_count: int = 5  # rarer categories fold into index 0 (unknown)
    # A peak with fewer train attempts reads as its height band's shared token: an embedding
    # learnt from one or two expeditions is noise (core/inputs.RARE_FOLDS names the fold).
    rare_peak_attempts: int = 50
    success_rate_prior_strength: float = 20.0  # pseudo-attempts pulling a rate toward the prior
    features_dir: Path = Path("var/features")

    @model_validator(mode="after")
    def _absolute(self) -> FeaturesConfig:
        self.features_dir = resolve_path(self.features_dir)
        return self

    @model_validator(mode="after")
    def _decision_time_inputs(self) -> FeaturesConfig:
        post_climb = [n for n in self.model_inputs().names if known_after_climb(n)]
        if post_climb and not self.retrospective:
            raise ValueError(
                f"{', '.join(post_climb)}: known only after the climb; a decision-time model "
                "cannot read it (set features.retrospective for an analysis model)"
            )
        return self

    def model_inputs(self) -> InputSet:
        """The tabular inputs of the models trained on these features: the spec's 20 tokens
        and the configured extras."""
        return InputSet.of((*SPEC_INPUTS, *self.extra_inputs))


class DriftConfig(Section):
    """Input drift against the champion's training rows of the same season whose push days lie
    within `weeks_around` weeks of those compared (the drift stage, the outlook's weather;
    deepsummit/contracts/monitor.py): an input whose population stability index passes
    `threshold` is flagged (0.1 moderate, 0.25 major), a weather variable whose mean lies more
    than `shift_threshold` of the reference's standard deviations away (the weather of one
    season is one sample of the year's, not rows apart: deepsummit/contracts/drift.py); each
    judged only with at least `min_rows` rows on each side."""

    threshold: float = 0.25
    shift_threshold: float = 3.0
    weeks_around: int = 3
    min_rows: int = 50


class TrainConfig(Section):
    # The snapshot's content enters the cache key as the train stage's input, not as a path.
    OPERATIONAL = frozenset({"checkpoint_dir", "snapshot"})

    learning_rate: float = 1e-4
    weight_decay: float = 0.05
    betas: tuple[float, float] = (0.9, 0.999)
    batch_size: int = 256
    max_epochs: int = 100
    patience: int = 10
    warmup_fraction: float = 0.05
    grad_clip_norm: float = 1.0
    # Which weights a training keeps: "best", those of the epoch with the best validation AUC
    # (early stopping after `patience` epochs without a better one: the spec); "last", those at
    # the end of the schedule (the refit on every season has no validation to choose by).
    keep: Literal["best", "last"] = "best"
    # An exponential moving average of the weights over the optimiser's steps, with this decay
    # per step, is what each epoch is judged and kept by; None = the weights as they are. It
    # smooths the last steps' noise out of the answer (two trainings agree more closely).
    ema_decay: float | None = Field(None, gt=0, lt=1)
    # Rows weighted by recency, halving every this many years before the newest training year,
    # so the model's base rate follows the newest seasons as the summit rate climbs; None =
    # every row counts the same.
    recency_half_life: float | None = Field(None, gt=0)
    seed: int = 42
    # The transformer is trained this many times, with seeds seed, seed + 1, …: the answer is
    # the calibrated mean probability of every ensemble member of every training, the band
    # their lowest and highest P.
    seeds: int = 3
    # Post-hoc calibration on the validation split (deepsummit/contracts/calibration.py).
    # Temperature: the one strictly monotone map that does not move the base rate, so the ranking of
    # push days and the AUC stay the model's; isotonic scores better (bench/calibration.py, README)
    # but its steps give neighbouring push days the same P.
    calibration: Literal["none", "temperature", "platt", "isotonic"] = "temperature"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    num_threads: int | None = None  # torch intra-op threads; None = torch's default
    max_train_rows: int | None = None  # a slice for quick runs and tests; None = all
    # The tree baselines' boosting rounds: a fixed budget, as the transformer's epochs are,
    # chosen on the backtest's folds before its scored ones (bench/tree_budgets.py).
    lightgbm_rounds: int = Field(300, ge=1)
    catboost_rounds: int = Field(200, ge=1)
    # The member check (deepsummit/train/recipe.py): the newest years of members' own records
    # before a model's held-out seasons, answered by the recipe trained on the years before
    # them; the calibration map is fitted there (and a recipe that keeps its best epoch counts
    # its epochs there).
    member_check_years: int = Field(2, ge=1)
    checkpoint_dir: Path = Path("var/checkpoints")
    # The features snapshot folder to train on; None = the newest under features.features_dir.
    snapshot: Path | None = None

    @model_validator(mode="after")
    def _absolute(self) -> TrainConfig:
        self.checkpoint_dir = resolve_path(self.checkpoint_dir)
        if self.snapshot is not None:
            self.snapshot = resolve_path(self.snapshot)
        return self


class MlflowConfig(Section):
    OPERATIONAL = frozenset({"unreachable_wait_s", "request_retries", "model_cache_dir"})

    tracking_uri: str = "http://127.0.0.1:5000"
    experiment: str = "deepsummit"
    registered_model: str = "deepsummit"
    champion_alias: str = "champion"
    # A tracking server that stops answering during training: one log line at once, then this
    # long for it to come back before the stage fails with one line (its checkpoint is kept).
    unreachable_wait_s: float = 120.0
    # MLflow's own retries of one request (MLFLOW_HTTP_REQUEST_MAX_RETRIES; its default, 7 with
    # doubling backoff, waits about 4 minutes without a word).
    request_retries: int = 3
    # Verified copies of registered versions (deepsummit/contracts/champion.py): a process that
    # scores with a version this machine has seen before downloads nothing.
    model_cache_dir: Path = Path("var/cache/models")

    @model_validator(mode="after")
    def _absolute(self) -> MlflowConfig:
        self.model_cache_dir = resolve_path(self.model_cache_dir)
        return self


class ServicesConfig(Section):
    host: str = "127.0.0.1"
    prefect_port: int = 4200
    mlflow_port: int = 5000
    work_pool: str = "local"
    gpu_work_pool: str = "gpu"
    # How often the local worker asks the server for runs to start: a deployment run waits up
    # to this long before it starts (Prefect's own default is 10 s).
    worker_query_s: float = Field(5.0, gt=0)
    run_dir: Path = Path("var/services")

    @model_validator(mode="after")
    def _absolute(self) -> ServicesConfig:
        self.run_dir = resolve_path(self.run_dir)
        return self

    @property
    def prefect_api_url(self) -> str:
        return f"http://{self.host}:{self.prefect_port}/api"

    @property
    def mlflow_url(self) -> str:
        return f"http://{self.host}:{self.mlflow_port}"


class AlertsConfig(Section):
    """Notifications of failed runs, sent by the Prefect server (deepsummit/services/alerts.py)."""

    # Where a Failed or Crashed summit / summit-trial run is reported: a URL taking a JSON POST
    # {"text": …} (a Slack incoming webhook, Mattermost, Google Chat, your own endpoint).
    # None = no alerts. `deepsummit up` applies a change.
    webhook_url: str | None = None

    @model_validator(mode="after")
    def _http_url(self) -> AlertsConfig:
        if self.webhook_url is not None and not is_url(self.webhook_url):
            # Not repeated in the message: a webhook URL is a secret.
            raise ValueError("webhook_url is not an http(s) URL")
        return self


class TuneConfig(Section):
    study_name: str = "deepsummit"
    # Any SQLAlchemy URL Optuna accepts; a relative SQLite path is under the project root.
    storage_url: str = "sqlite:///var/optuna.db"
    n_trials: int = 20  # finished trials the study should hold; a rerun only adds the rest
    concurrency: int = 2  # trials in flight at once: the number of (GPU) workers
    training_deployment: str = "summit-trial/trial"
    # The best configuration is trained, registered and gated by this deployment.
    final_deployment: str = "summit/train"
    # Replaces the spec's choices of a hyperparameter (learning_rate: [low, high], log-uniform),
    # e.g. {"hidden_size": [16, 32]} for a tiny search.
    search_space: dict[str, list[int | float]] = Field(default_factory=dict)
    sampler_startup_trials: int = 10  # random trials before TPE models the results
    pruner_startup_trials: int = 5  # finished trials before any trial is pruned
    pruner_warmup_epochs: int = 3  # epochs a trial always runs before it can be pruned
    trial_timeout_s: float = 6 * 3600.0  # a trial without a final state by then has failed
    poll_interval_s: float = 5.0
    profile_name: str = "tuned"  # saved as <var_dir>/profiles/<name>.toml


class Settings(Section):
    """Everything configurable, one object. Build it with `load_settings`."""

    profile: str = "cpu"
    paths: PathsConfig = Field(default_factory=PathsConfig)
    warehouse: WarehouseConfig = Field(default_factory=WarehouseConfig)
    sources: SourcesConfig = Field(default_factory=SourcesConfig)
    ingest: IngestConfig = Field(default_factory=IngestConfig)
    weather: WeatherConfig = Field(default_factory=WeatherConfig)
    forecast: ForecastConfig = Field(default_factory=ForecastConfig)
    outlook: OutlookConfig = Field(default_factory=OutlookConfig)
    features: FeaturesConfig = Field(default_factory=FeaturesConfig)
    drift: DriftConfig = Field(default_factory=DriftConfig)
    backtest: BacktestConfig = Field(default_factory=BacktestConfig)
    # The architecture (the spec's base configuration by default); what the inputs fix is no
    # setting (ModelConfig.INPUT_DIMENSIONS).
    model: ModelConfig = Field(default_factory=ModelConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    mlflow: MlflowConfig = Field(default_factory=MlflowConfig)
    services: ServicesConfig = Field(default_factory=ServicesConfig)
    alerts: AlertsConfig = Field(default_factory=AlertsConfig)
    tune: TuneConfig = Field(default_factory=TuneConfig)

    @model_validator(mode="before")
    @classmethod
    def _no_input_dimensions(cls, values: Any) -> Any:
        model = values.get("model") if isinstance(values, dict) else None
        fixed = sorted(set(model or {}) & set(ModelConfig.INPUT_DIMENSIONS))
        if fixed:
            raise ValueError(f"model.{fixed[0]}: fixed by the model's inputs, not a setting")
        return values

    def data_location(self, location: str) -> str:
        """A source location from config: URLs as they are, paths under the data dir."""
        if is_url(location):
            return location
        return str(resolve_path(self.paths.data_dir / location))


def deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def nested_overrides(dotted: dict[str, Any], base: dict[str, Any] | None = None) -> dict[str, Any]:
    """{"paths.warehouse": value, …} merged into a copy of `base` as nested settings overrides.

    None means "not given" and is left out, so options and flow parameters can pass everything.
    """
    overrides = deep_merge({}, base or {})
    for key, value in dotted.items():
        if value is None:
            continue
        node = overrides
        *parents, leaf = key.split(".")
        for part in parents:
            child = node[part] = dict(node.get(part, {}))
            node = child
        node[leaf] = str(value) if isinstance(value, Path) else value
    return overrides


def _env_values() -> dict[str, Any]:
    """DEEPSUMMIT_* variables as a nested dict (so they can be merged under overrides).
    Variables that name no settings section (DEEPSUMMIT_CONFIG, the workers'
    DEEPSUMMIT_PROJECT_DIR) are not settings."""
    values: dict[str, Any] = {}
    for key, raw in os.environ.items():
        parts = key.removeprefix("DEEPSUMMIT_").lower().split("__")
        if not key.startswith("DEEPSUMMIT_") or parts[0] not in Settings.model_fields:
            continue
        if len(parts) == 1 and parts[0] in _sections():
            raise ValueError(_section_hint(key, parts[0]))
        node = values
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = raw
    return values


def _sections() -> dict[str, type[BaseModel]]:
    """Settings sections by name (the fields of Settings that are models)."""
    return {
        name: field.annotation
        for name, field in Settings.model_fields.items()
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
    }


def _section_hint(key: str, name: str) -> str:
    """One line for a variable set on a whole section: the variables that set a value."""
    sections = _sections()
    same_name = [
        f"DEEPSUMMIT_{section.upper()}__{name.upper()}"
        for section, model in sections.items()
        if name in model.model_fields
    ]
    fields = ", ".join(sections[name].model_fields)
    hint = f"; did you mean {' or '.join(same_name)}?" if same_name else ""
    return (
        f"{key} names the settings section {name!r}, not a value: set a field of it as "
        f"DEEPSUMMIT_{name.upper()}__<FIELD> (fields: {fields}){hint}"
    )


def read_config_file(path: Path | None = None) -> dict[str, Any]:
    path = path or Path(os.environ.get("DEEPSUMMIT_CONFIG", DEFAULT_CONFIG_FILE))
    if not path.exists():
        return {}
    with path.open("rb") as handle:
        return tomllib.load(handle)


def saved_profile_path(name: str, var_dir: str | Path | None = None) -> Path:
    """A profile written by a run (the tuned one): `<var_dir>/profiles/<name>.toml`, read by
    `load_settings` when the config file has no profile of that name."""
    return resolve_path(var_dir or PathsConfig().var_dir) / "profiles" / f"{name}.toml"


def available_profiles(config_file: Path | None = None) -> list[str]:
    return sorted(read_config_file(config_file).get("profiles", {}))


def _profile(profiles: dict[str, Any], name: str, seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """A profile's values, over those of the profile it `extends` (if any)."""
    values = dict(profiles[name])
    parent = values.pop("extends", None)
    if parent is None:
        return values
    if parent not in profiles or parent in (*seen, name):
        raise ValueError(f"profile {name!r} extends {parent!r}: no such profile, or a cycle")
    return deep_merge(_profile(profiles, parent, (*seen, name)), values)


def load_settings(
    profile: str | None = None,
    overrides: dict[str, Any] | None = None,
    config_file: Path | None = None,
) -> Settings:
    """Settings for `profile` (default: DEEPSUMMIT_PROFILE, else the file's, else "cpu")."""
    document = read_config_file(config_file)
    file_settings: dict[str, Any] = document.get("settings", {})
    profiles: dict[str, Any] = document.get("profiles", {})
    chosen = profile or os.environ.get("DEEPSUMMIT_PROFILE") or file_settings.get("profile", "cpu")
    if chosen not in profiles:
        outer = deep_merge(deep_merge(file_settings, _env_values()), overrides or {})
        saved = saved_profile_path(chosen, outer.get("paths", {}).get("var_dir"))
        if saved.exists():
            profiles = {**profiles, chosen: read_config_file(saved)}
        elif profiles:
            raise ValueError(f"unknown profile {chosen!r}; known: {', '.join(sorted(profiles))}")
    values = deep_merge(file_settings, _profile(profiles, chosen) if chosen in profiles else {})
    values = deep_merge(values, _env_values())
    values = deep_merge(values, overrides or {})
    values["profile"] = chosen
    return Settings.model_validate(values)
