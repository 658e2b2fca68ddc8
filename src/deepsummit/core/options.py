"""The options a person sets per run, declared once: the `deepsummit` commands' options and the
flows' `options` parameter are both this model, and each field names the setting it overrides.

None means "from config" (deepsummit.toml, its profile, DEEPSUMMIT_* variables), so a flow or a
command can pass every field and only what was given wins.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from deepsummit.core.config import nested_overrides
from deepsummit.core.errors import BadInput


def _option(setting: str, description: str) -> Any:
    return Field(None, description=description, json_schema_extra={"setting": setting})


class RunOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    data_dir: Path | None = _option("paths.data_dir", "Folder of the data bundle.")
    warehouse: Path | None = _option("paths.warehouse", "DuckDB warehouse file.")
    members: str | None = _option("sources.members", "Members file or URL (TidyTuesday layout).")
    expeditions: str | None = _option(
        "sources.expeditions", "Expeditions file or URL (with smtdate)."
    )
    peaks: str | None = _option("sources.peaks", "Peaks file or URL (with coordinates).")
    hdb_members: str | None = _option(
        "sources.hdb_members", "Native HDB members export (CSV or DBF), with climber names."
    )
    hdb_expeditions: str | None = _option(
        "sources.hdb_expeditions", "Native HDB expeditions export (CSV or DBF)."
    )
    allow_shrink: bool | None = _option(
        "ingest.allow_shrink",
        "Accept sources that leave a clean table more than ingest.max_shrink smaller.",
    )
    weather_source: Literal["archive", "open-meteo"] | None = _option(
        "weather.source", "archive (the bundled ERA5 file) or open-meteo (the live API)."
    )
    api_url: str | None = _option("weather.api_url", "Open-Meteo historical archive endpoint.")
    archive: str | None = _option(
        "weather.archive_path", "ERA5 daily archive (parquet), under the data dir."
    )
    features_dir: Path | None = _option("features.features_dir", "Folder of features snapshots.")
    train_until: int | None = _option(
        "features.split.train_until", "Last expedition year of the training split."
    )
    validation_until: int | None = _option(
        "features.split.validation_until", "Last year of the validation split."
    )
    test_until: int | None = _option("features.split.test_until", "Last year of the test split.")
    snapshot: Path | None = _option(
        "train.snapshot", "Features snapshot folder to train on (default: the newest)."
    )
    max_train_rows: int | None = _option(
        "train.max_train_rows", "Train on at most this many rows (a quick slice)."
    )
    max_epochs: int | None = _option("train.max_epochs", "Epoch limit.")
    tracking_uri: str | None = _option(
        "mlflow.tracking_uri", "MLflow tracking URI (server URL or sqlite:///…)."
    )
    forecast_url: str | None = _option("forecast.api_url", "Open-Meteo forecast endpoint.")
    # `peak`, not `peaks`: `peaks` is the records' peaks file (sources.peaks) above.
    peak: list[str] | None = _option(
        "outlook.peaks", "Peak id(s) of the outlook, e.g. EVER (repeat --peak for more)."
    )
    first_day: date | None = _option(
        "outlook.first_day", "First candidate push day, YYYY-MM-DD (default: today in Nepal)."
    )
    as_of: date | None = _option(
        "outlook.as_of",
        "Replay the outlook of that morning, YYYY-MM-DD, from stored weather (--weather-source).",
    )
    days: int | None = _option("outlook.days", "Candidate push days (at most 16).")
    without_weather: bool | None = _option(
        "outlook.without_weather",
        "For a peak without a forecast (no trusted coordinates; in a replay, no stored "
        "weather): the plan's P without weather instead of an error.",
    )
    team: Path | None = _option(
        "outlook.team_file", "Team CSV: name,age,sex,nationality,role,hired; a row per member."
    )
    n_trials: int | None = _option(
        "tune.n_trials", "Trials the study should hold when done (a rerun only runs the rest)."
    )
    concurrency: int | None = _option(
        "tune.concurrency", "Trials in flight at once (= workers of the pool)."
    )
    study_name: str | None = _option("tune.study_name", "Optuna study name.")
    storage_url: str | None = _option(
        "tune.storage_url",
        "Study database (sqlite:///… or postgresql://…), without a password: see storage_secret.",
    )
    storage_secret: str | None = _option(
        "tune.storage_secret",
        "Prefect Secret block holding the study database URL (for a URL with a password).",
    )
    search_space: dict[str, list[int | float]] | None = _option(
        "tune.search_space",
        'Replaced choices, e.g. {"hidden_size": [16, 32]}; learning_rate takes [low, high].',
    )

    @field_validator("storage_url")
    @classmethod
    def _storage_url_without_password(cls, url: str | None) -> str | None:
        refuse_password(url)
        return url

    @classmethod
    def setting(cls, name: str) -> str:
        """The dotted setting option `name` overrides."""
        return cls.model_fields[name].json_schema_extra["setting"]  # type: ignore[index]

    def overrides(self, base: dict[str, Any] | None = None) -> dict[str, Any]:
        """The given options as nested settings overrides, merged over `base`."""
        given = self.model_dump(exclude_none=True)
        dotted = {self.setting(name): value for name, value in given.items()}
        merged = nested_overrides(dotted, base)
        refuse_password(merged.get("tune", {}).get("storage_url"))
        return merged


def refuse_password(storage_url: str | None) -> None:
    """A study URL given as a run parameter must hold no password: Prefect stores a flow run's
    parameters as they are, shown in the UI and passed on to every trial's flow run."""
    if storage_url and urlsplit(storage_url).password:
        # The URL is not repeated: it holds the password.
        raise BadInput(
            "tune.storage_url: a URL with a password cannot be a run parameter (Prefect would "
            "keep it in the flow run); save the URL as a Prefect Secret block and pass its name "
            "as tune.storage_secret, or set DEEPSUMMIT_TUNE__STORAGE_URL on the workers"
        )
