"""The settings' sections: what each configures, its defaults, and which of its fields are
operational (change how a stage runs, never what it produces). deepsummit/core/config.py puts
them together into `Settings` and reads them from file and environment. The weather sections
are deepsummit/core/weather_sections.py, the local services' deepsummit/core/service_sections.py.

Relative paths are resolved against the project folder, so the CLI, the tests and the Prefect
workers share one warehouse and one data bundle by default. The project folder is
`DEEPSUMMIT_PROJECT_DIR` when set (the deployments set it for their workers), else the source
checkout this package is installed from (an editable install), else the working directory (an
installed wheel).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    create_model,
    model_validator,
)

from deepsummit.core.inputs import (
    INPUTS_BY_NAME,
    SPEC_INPUTS,
    InputSet,
    Known,
)
from deepsummit.core.planned import Scope, fields_of

PROJECT_DIR_VARIABLE = "DEEPSUMMIT_PROJECT_DIR"


def project_root() -> Path:
    """Where relative settings paths point (see the module docstring)."""
    if os.environ.get(PROJECT_DIR_VARIABLE):
        return Path(os.environ[PROJECT_DIR_VARIABLE]).resolve()
    checkout = Path(__file__).resolve().parents[3]  # <checkout>/src/deepsummit/core/sections.py
    if (checkout / "pyproject.toml").exists() and (checkout / "src" / "deepsummit").is_dir():
        return checkout
    return Path.cwd()


PROJECT_ROOT = project_root()


def known_after_climb(name: str) -> bool:
    return INPUTS_BY_NAME[name].known is Known.AFTER_CLIMB


def resolve_path(value: str | Path) -> Path:
    """A path from config: absolute as given, relative to the project root otherwise."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else (PROJECT_ROOT / path).resolve()


def is_url(location: str) -> bool:
    return location.startswith(("http://", "https://"))


# A path setting: absolute as given, relative to the project root otherwise (defaults too).
ProjectPath = Annotated[Path, AfterValidator(resolve_path)]


class Section(BaseModel):
    """A settings section: a misspelt key is an error, never silently ignored."""

    model_config = ConfigDict(extra="forbid", validate_default=True)

    # Fields that change how a stage runs (where it caches, how long it waits), never what it
    # produces: the stages' cache keys leave them out.
    OPERATIONAL: ClassVar[frozenset[str]] = frozenset()

    def result_settings(self) -> dict[str, Any]:
        """The section as JSON, without its operational fields: what a cache key records."""
        return self.model_dump(mode="json", exclude=set(self.OPERATIONAL))


class PathsConfig(Section):
    data_dir: ProjectPath = Path("../shared/data")
    # The warehouse, run folders, caches and service state; never committed.
    var_dir: ProjectPath = Path("var")
    warehouse: ProjectPath = Path("var/warehouse.duckdb")
    runs_dir: ProjectPath = Path("var/runs")


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
    team_file: ProjectPath = Path("deployments/outlook-team.csv")

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
    output_dir: ProjectPath = Path("var/backtest")


class FeaturesConfig(Section):
    split: SplitConfig = Field(default_factory=SplitConfig)
    # Tabular inputs beyond the model spec's 20 tokens, by name (deepsummit/core/inputs.py
    # declares each one and when it is known); bench/studies/which_training_profile.py judges
    # what one is worth.
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
    features_dir: ProjectPath = Path("var/features")

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


# The member-group families a calibration map may shift: those every answered row states.
CalibrationFamily = Literal["age", "sex", "hired staff", "oxygen plan", "nationality"]


class TrainConfig(Section):
    # The settings of the map fitted after training: a trained network (a checkpoint, a cached
    # backtest training) serves under any of them.
    CALIBRATION: ClassVar[frozenset[str]] = frozenset(
        {"calibration", "calibration_shifts_by", "calibration_shift_penalty"}
    )
    # The snapshot's content enters the cache key as the train stage's input, not as a path.
    OPERATIONAL = frozenset(
        {
            "checkpoint_dir",
            "checkpoint_upload_every",
            "snapshot",
            "lease",
            "deployment",
            "worker_lost_s",
            "worker_lost_restarts",
            "cpu_fallback",
            "pickup_deadline_s",
            "training_deadline_s",
        }
    )

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
    # Post-hoc calibration, fitted on the member check's held-out members (train/recipe.py).
    # Temperature: one parameter and strictly monotone, so the ranking of push days and the AUC
    # stay the model's; isotonic's steps would give neighbouring push days the same P.
    calibration: Literal["none", "temperature", "platt", "isotonic"] = "temperature"
    # The temperature or Platt map also shifts the logit of each member group of these families
    # (deepsummit/contracts/member_groups.py; those a planned attempt states, so `role` is not
    # one), fitted with it on the same rows, each shift's square times the penalty added to the
    # log loss. Age: the network's answer for the oldest climbers stays near the others' while
    # their summit rate falls away (issue 42; bench/studies/which_calibration_shifts.py,
    # docs/evaluation.md).
    calibration_shifts_by: tuple[CalibrationFamily, ...] = ("age",)
    calibration_shift_penalty: float = Field(0.01, ge=0)
    # "auto": CUDA where there is a device; without one the training refuses to start, unless
    # cpu_fallback allows the CPU (the spec's model trains about 74 times slower there).
    device: Literal["auto", "cpu", "cuda"] = "auto"
    cpu_fallback: bool = False
    num_threads: int | None = None  # torch intra-op threads; None = torch's default
    max_train_rows: int | None = None  # a slice for quick runs and tests; None = all
    # The member check (deepsummit/train/recipe.py): the newest years of members' own records
    # before a model's held-out seasons, answered by the recipe trained on the years before
    # them; the calibration map is fitted there (and a recipe that keeps its best epoch counts
    # its epochs there).
    member_check_years: int = Field(2, ge=1)
    checkpoint_dir: ProjectPath = Path("var/checkpoints")
    # The train stage's checkpoint also goes to the MLflow tracking server after every this many
    # epochs (and after the last), so the training, rescheduled on a worker sharing no disk,
    # resumes from it (deepsummit/train/checkpoint_store.py); 0 or None = never. The spec's
    # model: 80.6 MB, 0.44 s an upload to a local server (bench/checkpoint_upload.py) against
    # 6.2 s an epoch on a GPU, so every 5th costs about 1.5% and a reschedule redoes 4 epochs
    # at most.
    checkpoint_upload_every: int | None = Field(5, ge=0)
    # The features snapshot folder to train on; None = the newest under features.features_dir.
    snapshot: ProjectPath | None = None
    # Set by the training flow run, not by hand: the lease it must hold to upload and register
    # (deepsummit/contracts/training_lease.py); None = none asked (training in process).
    lease: str | None = None
    # Where `summit/train` trains: a flow run of this deployment (prefect.yaml), on its work pool,
    # fed the features snapshot by URI; in the chain's own process when it is blank, or when the
    # deployment, its pool or an online worker on it is missing (said in one line).
    deployment: str | None = "summit-train/local"
    # A training flow run whose worker has sent the Prefect server no heartbeat for this long
    # is taken for lost (its machine died: Prefect leaves the run RUNNING for ever): the chain
    # marks it Crashed and starts the deployment again, which resumes from the uploaded
    # checkpoint. Three of Prefect's worker heartbeats (PREFECT_WORKER_HEARTBEAT_SECONDS, 30 s).
    worker_lost_s: float = Field(90.0, gt=0)
    # How often one chain starts its training again after a lost worker, or a flow run whose
    # process crashed while its worker lived (killed, out of memory), before it fails.
    worker_lost_restarts: int = Field(2, ge=0)
    # Past either, the chain cancels its training flow run and fails in one line naming which:
    # no worker of the pool has started it this long after it was scheduled; it has been
    # running this long (the spec's model trains in about an hour on one GPU).
    pickup_deadline_s: float = Field(900.0, gt=0)
    training_deadline_s: float = Field(6 * 3600.0, gt=0)

    @model_validator(mode="after")
    def _shifts_need_a_parametric_map(self) -> TrainConfig:
        if self.calibration_shifts_by and self.calibration not in ("temperature", "platt"):
            raise ValueError(
                f"train.calibration_shifts_by needs a temperature or platt map, not "
                f"{self.calibration!r} (set it to [] for that map)"
            )
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
    model_cache_dir: ProjectPath = Path("var/cache/models")


class TuneConfig(Section):
    study_name: str = "deepsummit"
    # Any SQLAlchemy URL Optuna accepts; a relative SQLite path is under the project root.
    # With a password, set it where only workers read it (deepsummit.toml on the worker,
    # DEEPSUMMIT_TUNE__STORAGE_URL) or use storage_secret: a run parameter would show it.
    storage_url: str = "sqlite:///var/optuna.db"
    # Name of a Prefect Secret block holding the study URL (password included): each flow run
    # of the search reads it from the Prefect server, and it replaces storage_url there.
    storage_secret: str | None = None
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
