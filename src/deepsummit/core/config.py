"""One typed configuration for the whole pipeline, with named profiles.

Precedence, lowest to highest: the defaults below, the `[settings]` table of the config file
(`deepsummit.toml`, shipped in this package, or the file named by `DEEPSUMMIT_CONFIG`), the
`[profiles.<name>]` table of that file for the selected profile, environment variables
(`DEEPSUMMIT_<SECTION>__<FIELD>`, e.g. `DEEPSUMMIT_TRAIN__MAX_EPOCHS=3`), and explicit overrides
passed to `load_settings` (what the CLI options set).

The sections themselves, and how relative paths resolve, are deepsummit/core/sections.py.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from importlib.resources import files
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    Field,
    model_validator,
)

from deepsummit.core.baseline_sections import BaselinesConfig
from deepsummit.core.sections import (
    BacktestConfig,
    DriftConfig,
    FeaturesConfig,
    IngestConfig,
    MlflowConfig,
    OutlookConfig,
    PathsConfig,
    Section,
    SourcesConfig,
    TrainConfig,
    TuneConfig,
    WarehouseConfig,
    is_url,
    resolve_path,
)
from deepsummit.core.service_sections import AlertsConfig, ServicesConfig
from deepsummit.core.weather_sections import ForecastConfig, WeatherConfig
from deepsummit.model.config import ModelConfig

DEFAULT_CONFIG_FILE = Path(str(files("deepsummit") / "deepsummit.toml"))
CONFIG_VARIABLE = "DEEPSUMMIT_CONFIG"  # another settings file than the package's


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
    baselines: BaselinesConfig = Field(default_factory=BaselinesConfig)
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


def env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    """The DEEPSUMMIT_* variables of `environ` as a nested dict (so they can be merged under
    overrides). Variables that name no settings section (DEEPSUMMIT_CONFIG, the workers'
    DEEPSUMMIT_PROJECT_DIR) are not settings."""
    values: dict[str, Any] = {}
    for key, raw in environ.items():
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
    path = path or Path(os.environ.get(CONFIG_VARIABLE, DEFAULT_CONFIG_FILE))
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
        outer = deep_merge(deep_merge(file_settings, env_overrides(os.environ)), overrides or {})
        saved = saved_profile_path(chosen, outer.get("paths", {}).get("var_dir"))
        if saved.exists():
            profiles = {**profiles, chosen: read_config_file(saved)}
        elif profiles:
            raise ValueError(f"unknown profile {chosen!r}; known: {', '.join(sorted(profiles))}")
    values = deep_merge(file_settings, _profile(profiles, chosen) if chosen in profiles else {})
    values = deep_merge(values, env_overrides(os.environ))
    values = deep_merge(values, overrides or {})
    values["profile"] = chosen
    return Settings.model_validate(values)
