"""Asset keys a person can read, and the lineage they form, declared once.

raw records (the source files or URLs) → clean tables → weather_daily → features → model version.
Keys are stable URIs naming the warehouse table, the file or the registered model version, so the
same asset gets the same key in every run (and in the CLI's runs).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

from prefect.assets import Asset, AssetProperties
from prefect.types.names import RESTRICTED_ASSET_CHARACTERS

from pipeline.config import Settings, is_url

CLEAN_TABLES = ("members", "expeditions", "peaks")
RECORD_SOURCES = ("members", "expeditions", "peaks", "hdb_members", "hdb_expeditions")


def _key(uri: str) -> str:
    # A path with a space or a `#` is still a path; asset keys refuse those characters.
    for char in RESTRICTED_ASSET_CHARACTERS:
        uri = uri.replace(char, "_")
    return uri


def _asset(uri: str, name: str, description: str, url: str | None = None) -> Asset:
    return Asset(
        key=_key(uri), properties=AssetProperties(name=name, description=description, url=url)
    )


def source_asset(location: str) -> Asset:
    """A raw input: a URL as it is, a file as file://<absolute path>."""
    uri = location if is_url(location) else f"file://{Path(location).resolve()}"
    return _asset(uri, Path(urlparse(uri).path).name, f"raw input {location}")


def table_asset(settings: Settings, table: str) -> Asset:
    return _asset(
        f"duckdb://{settings.paths.warehouse}/{table}",
        table,
        f"table {table} of the DuckDB warehouse {settings.paths.warehouse}",
    )


def record_source_assets(settings: Settings) -> list[Asset]:
    locations = [getattr(settings.sources, name) for name in RECORD_SOURCES]
    return [source_asset(settings.data_location(loc)) for loc in locations if loc]


def weather_source_asset(settings: Settings) -> Asset:
    if settings.weather.source == "archive":
        return source_asset(settings.data_location(settings.weather.archive_path))
    return source_asset(settings.weather.api_url)


def clean_table_assets(settings: Settings) -> list[Asset]:
    return [table_asset(settings, table) for table in (*CLEAN_TABLES, "quarantine")]


def weather_asset(settings: Settings) -> Asset:
    return table_asset(settings, "weather_daily")


def features_table_asset(settings: Settings) -> Asset:
    return table_asset(settings, "features")


def features_snapshots_asset(settings: Settings) -> Asset:
    """The folder of features snapshots (one sub-folder per content digest, as training reads)."""
    directory = settings.features.features_dir
    return _asset(
        f"file://{directory}",
        "features snapshots",
        f"model inputs per split with their preprocessing, one folder per digest in {directory}",
    )


def features_assets(settings: Settings) -> list[Asset]:
    return [features_table_asset(settings), features_snapshots_asset(settings)]


def tracking_host(tracking_uri: str) -> str:
    """host:port of an http tracking URI; the store's path for a sqlite/file one."""
    parsed = urlparse(tracking_uri)
    return parsed.netloc or parsed.path.lstrip("/")


def model_version_asset(settings: Settings, version: int | str, url: str | None) -> Asset:
    name = settings.mlflow.registered_model
    return _asset(
        f"mlflow://{tracking_host(settings.mlflow.tracking_uri)}/models/{name}/{version}",
        f"{name} v{version}",
        f"version {version} of the registered model {name}",
        url=url,
    )
