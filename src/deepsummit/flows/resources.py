"""What the stages read and write, by name (deepsummit/flows/stage_resource.py says what a
resource knows): the warehouse's tables, the record sources, the weather source and the
forecasts, the features snapshot, the registered model version and the champion, the drift and
backtest reports, the outlooks.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
from prefect.assets import Asset

from deepsummit.core import warehouse
from deepsummit.core.config import Settings
from deepsummit.core.errors import PipelineError, ServiceUnavailable
from deepsummit.core.sections import MlflowConfig, SourcesConfig, is_url
from deepsummit.features.tabular import HISTORY_TABLES
from deepsummit.flows.artifacts import link
from deepsummit.flows.stage_resource import (
    Resource,
    asset,
    file_state,
    source_asset,
    table_names,
    tracking_host,
)


@dataclass(frozen=True)
class Table(Resource):
    """A table of the DuckDB warehouse."""

    name: str
    in_warehouse = True

    @property
    def tables(self) -> tuple[str, ...]:
        return (self.name,)

    def assets(self, settings: Settings, report: Any = None) -> list[Asset]:
        path = settings.paths.warehouse
        return [asset(f"duckdb://{path}/{self.name}", self.name, f"table {self.name} of {path}")]

    def _digest(self, con: duckdb.DuckDBPyConnection) -> tuple[int, str]:
        if self.name == "weather_daily":  # values only: a refetch of the same values is no change
            return _weather_digest(con)
        frame = con.sql(f'SELECT * FROM "{self.name}"').pl()
        return frame.height, warehouse.frame_digest(frame)

    def cache_input(self, settings: Settings) -> Any:
        if not self.present(settings):
            return "missing"
        with warehouse.connect(settings.paths.warehouse, read_only=True) as con:
            return self._digest(con)[1]

    def present(self, settings: Settings) -> bool:
        if not settings.paths.warehouse.exists():
            return False
        with warehouse.connect(settings.paths.warehouse, read_only=True) as con:
            return self.name in table_names(con)

    def facts(self, settings: Settings, report: Any) -> dict[str, Any]:
        with warehouse.connect(settings.paths.warehouse, read_only=True) as con:
            rows, digest = self._digest(con)
        return {"rows": rows, "digest": digest, "source": str(settings.paths.warehouse)}


@dataclass(frozen=True)
class RawTable(Table):
    """The raw rows of one record layout: written when the sources read that layout (the
    native HDB export replaces the TidyTuesday layout of its table)."""

    def applies(self, settings: Settings) -> bool:
        from deepsummit.records.stage import source_layouts

        return self.name in {layout.name for layout, _ in source_layouts(settings.sources).values()}


RAW_RECORD_TABLES: tuple[str, ...] = (
    "raw_peaks",
    "raw_expeditions",
    "raw_hdb_expeditions",
    "raw_expeditions_tidytuesday",
    "raw_members",
    "raw_hdb_members",
)


class RecordSources(Resource):
    """The configured Himalayan Database files or URLs (every field of `sources` that is set)."""

    name = "record_sources"

    def _locations(self, settings: Settings) -> list[str]:
        names = SourcesConfig.model_fields
        values = [getattr(settings.sources, name) for name in names]
        return [settings.data_location(value) for value in values if value]

    def assets(self, settings: Settings, report: Any = None) -> list[Asset]:
        return [source_asset(location) for location in self._locations(settings)]

    def cache_input(self, settings: Settings) -> Any:
        return [file_state(location) for location in self._locations(settings)]


class WeatherSource(Resource):
    """The bundled ERA5 archive file, or the Open-Meteo endpoint."""

    name = "weather_source"

    def _location(self, settings: Settings) -> str:
        if settings.weather.source == "archive":
            return settings.data_location(settings.weather.archive_path)
        return settings.weather.api_url

    def assets(self, settings: Settings, report: Any = None) -> list[Asset]:
        return [source_asset(self._location(settings))]

    def cache_input(self, settings: Settings) -> Any:
        return file_state(self._location(settings))


class FeaturesSnapshot(Resource):
    """The folder of features snapshots (one sub-folder per content digest); a reader is given
    the one to read: `train.snapshot`, else the newest."""

    name = "features_snapshot"

    def assets(self, settings: Settings, report: Any = None) -> list[Asset]:
        directory = settings.features.features_dir
        return [
            asset(
                f"file://{directory}",
                "features snapshots",
                f"model inputs per split with their preprocessing, one folder per digest in "
                f"{directory}",
            )
        ]

    def location(self, settings: Settings) -> Path:
        from deepsummit.contracts.snapshot import newest_features_dir

        return settings.train.snapshot or newest_features_dir(settings.features.features_dir)

    def present(self, settings: Settings) -> bool:
        try:
            return self.location(settings).exists()
        except PipelineError:
            return False

    def cache_input(self, settings: Settings) -> Any:
        """The snapshot's content digest, as its preprocessing recorded it: a snapshot built
        again with the same content is the same input (its files' times are not)."""
        from deepsummit.contracts.snapshot import PREPROCESSING_FILE

        recorded = self.location(settings) / PREPROCESSING_FILE
        if not recorded.exists():
            return file_state(str(self.location(settings)))  # the stage reports what is wrong
        return json.loads(recorded.read_text())["extra"]["snapshot_digest"]

    def facts(self, settings: Settings, report: Any) -> dict[str, Any]:
        return {"rows": report.rows, "digest": report.digest, "source": str(report.directory)}


def model_asset(config: MlflowConfig, version: str, url: str | None) -> Asset:
    """A version of the registered model: the same key whether a run registered it or read it."""
    name = config.registered_model
    host = tracking_host(config.tracking_uri)
    return asset(
        f"mlflow://{host}/models/{name}/{version}",
        f"{name} v{version}",
        f"version {version} of the registered model {name}",
        url=url,
    )


class ModelVersion(Resource):
    """A version of the registered model, known once the registry has assigned its number."""

    name = "model_version"
    late = True

    def assets(self, settings: Settings, report: Any = None) -> list[Asset]:
        return [model_asset(settings.mlflow, str(report.model_version), report.model_url)]

    def facts(self, settings: Settings, report: Any) -> dict[str, Any]:
        return {
            "version": str(report.model_version),
            "run_id": report.mlflow_run_id,
            "champion": report.champion,
            "decision": report.decision_reason,
            "rows": report.rows["refit"],
            "digest": report.digest,
        }

    def links(self, report: Any) -> str:
        version = link(f"v{report.model_version}", report.model_url)
        return f"{link('MLflow run', report.run_url)} {version}"


class ChampionModel(Resource):
    """The version the champion alias names when a stage reads it (pinned for the whole stage:
    the alias may move meanwhile); its asset is that version's."""

    name = "champion_model"
    missing_hint = "run `deepsummit train` (or `prefect deployment run summit/train`) first"

    def _version(self, settings: Settings) -> Any:
        from deepsummit.contracts.champion import champion_version, registry_reachable

        if not registry_reachable(settings.mlflow.tracking_uri):
            raise ServiceUnavailable(f"no MLflow registry at {settings.mlflow.tracking_uri}")
        return champion_version(settings.mlflow)

    def assets(self, settings: Settings, report: Any = None) -> list[Asset]:
        from deepsummit.train.tracking import ui_links

        version = str(self._version(settings).version)
        name = settings.mlflow.registered_model
        _, url = ui_links(settings.mlflow.tracking_uri, "", "", name, version)
        return [model_asset(settings.mlflow, version, url if is_url(url) else None)]

    def present(self, settings: Settings) -> bool:
        try:
            self._version(settings)
        except PipelineError:
            return False
        return True

    def cache_input(self, settings: Settings) -> Any:
        from deepsummit.contracts.champion import TAG_FILES_DIGEST

        champion = self._version(settings)
        return [str(champion.version), champion.tags.get(TAG_FILES_DIGEST)]


class DriftReports(Resource):
    """The drift stage's reports, one JSON file per (features snapshot, champion version)."""

    name = "drift_report"

    def _directory(self, settings: Settings) -> Path:
        from deepsummit.drift.stage import reports_dir

        return reports_dir(settings.paths)

    def assets(self, settings: Settings, report: Any = None) -> list[Asset]:
        directory = self._directory(settings)
        return [
            asset(
                f"file://{directory}",
                "drift reports",
                f"the newest season's inputs against the champion's training split, in {directory}",
            )
        ]

    def present(self, settings: Settings) -> bool:
        return self._directory(settings).exists()

    def facts(self, settings: Settings, report: Any) -> dict[str, Any]:
        """Rows: the features compared; digest: the report file's content."""
        if report.report is None:
            return {"rows": 0, "digest": "", "compared": report.note, "source": ""}
        return {
            "rows": len(report.report.rows),
            "digest": hashlib.sha256(report.path.read_bytes()).hexdigest(),
            "compared": report.note,
            "drifted": len(report.report.drifted),
            "source": str(report.path),
        }


class BacktestReports(Resource):
    """The backtest stage's reports and fold results, one folder per (snapshot, settings)."""

    name = "backtest_report"

    def _directory(self, settings: Settings) -> Path:
        return settings.backtest.output_dir

    def assets(self, settings: Settings, report: Any = None) -> list[Asset]:
        directory = self._directory(settings)
        return [
            asset(
                f"file://{directory}",
                "backtest reports",
                f"season-by-season and push-day backtests of the features snapshots, in "
                f"{directory}",
            )
        ]

    def present(self, settings: Settings) -> bool:
        return self._directory(settings).exists()

    def facts(self, settings: Settings, report: Any) -> dict[str, Any]:
        """Rows: the held-out attempts scored; digest: the report file's content."""
        path = report.files["report"]
        return {
            "rows": sum(s.rows for s in report.report.seasons.seasons),
            "digest": hashlib.sha256(path.read_bytes()).hexdigest(),
            "source": str(path),
        }


class ForecastApi(Resource):
    """The Open-Meteo forecast endpoint."""

    name = "forecast_api"

    def assets(self, settings: Settings, report: Any = None) -> list[Asset]:
        return [source_asset(settings.forecast.api_url)]

    def cache_input(self, settings: Settings) -> Any:
        return settings.forecast.api_url


class ForecastWeather(Resource):
    """The forecasts stored in weather_daily (sources `forecast@<issue time>`): every issue
    is kept, so an outlook can be computed again from the forecast that fed it."""

    name = "forecast_weather"
    in_warehouse = True
    tables = ("weather_daily",)
    missing_hint = "run `deepsummit outlook` (it fetches the forecast first)"

    def assets(self, settings: Settings, report: Any = None) -> list[Asset]:
        path = settings.paths.warehouse
        return [
            asset(
                f"duckdb://{path}/weather_daily/forecast",
                "forecast weather",
                f"Open-Meteo forecasts in weather_daily of {path}, one source per issue",
            )
        ]

    def _rows_and_digest(self, settings: Settings) -> tuple[int, str]:
        with warehouse.connect(settings.paths.warehouse, read_only=True) as con:
            return _weather_digest(con, forecasts=True)

    def present(self, settings: Settings) -> bool:
        return Table("weather_daily").present(settings) and self._rows_and_digest(settings)[0] > 0

    def cache_input(self, settings: Settings) -> Any:
        return self._rows_and_digest(settings)[1] if self.present(settings) else "missing"

    def facts(self, settings: Settings, report: Any) -> dict[str, Any]:
        sources = {peak.peakid: peak.source for peak in report.peaks}
        return {"rows": report.rows, "digest": report.digest, "sources": sources}


class Outlooks(Table):
    """The outlooks table; its facts name the model version and forecasts behind this run's."""

    def facts(self, settings: Settings, report: Any) -> dict[str, Any]:
        return {
            **super().facts(settings, report),
            "written": report.rows,
            "model_version": report.model_version,
            "weather_sources": {peak.peakid: peak.weather_source for peak in report.peaks},
        }


RESOURCES: dict[str, Resource] = {
    resource.name: resource
    for resource in (
        RecordSources(),
        WeatherSource(),
        *(RawTable(name) for name in RAW_RECORD_TABLES),
        *(
            Table(name)
            for name in ("members", "expeditions", "expedition_details", "peaks", "quarantine")
        ),
        Table("weather_daily"),
        Table("weather_api_calls"),
        *(
            Table(name)
            for name in ("attempt_candidates", "attempts", "attempt_exclusions", "weather_windows")
        ),
        *(Table(name) for name in HISTORY_TABLES),
        Table("features"),
        FeaturesSnapshot(),
        ModelVersion(),
        ChampionModel(),
        DriftReports(),
        BacktestReports(),
        ForecastApi(),
        ForecastWeather(),
        Outlooks("outlooks"),
    )
}


def _weather_digest(con: duckdb.DuckDBPyConnection, forecasts: bool = False) -> tuple[int, str]:
    """weather/store.py's content digest, imported when asked: the weather package brings
    Pandera, pandas and the Open-Meteo client (0.6 s), which a process that runs no weather
    stage (a training or trial flow run on a GPU worker) should not pay for at its start."""
    from deepsummit.weather.store import content_digest

    return content_digest(con, forecasts=forecasts)
