"""What a resource is: something a stage reads or writes, with its Prefect asset keys, what a
reader's cache key records of it, whether it exists, and the facts a writer reports
(deepsummit/flows/resources.py names every one).

Keys are stable URIs naming the warehouse table, the file or the registered model version, so the
same thing gets the same key in every run (and in the CLI's runs):
`duckdb://<warehouse>/<table>`, `file://<path>` (or the URL of a remote source),
`mlflow://<tracking host>/models/<name>/<version>`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import duckdb
from prefect.assets import Asset, AssetProperties
from prefect.types.names import RESTRICTED_ASSET_CHARACTERS

from deepsummit.core import warehouse
from deepsummit.core.config import Settings
from deepsummit.core.sections import is_url


def asset_key(uri: str) -> str:
    # A path with a space or a `#` is still a path; asset keys refuse those characters.
    for char in RESTRICTED_ASSET_CHARACTERS:
        uri = uri.replace(char, "_")
    return uri


def asset(uri: str, name: str, description: str, url: str | None = None) -> Asset:
    return Asset(
        key=asset_key(uri), properties=AssetProperties(name=name, description=description, url=url)
    )


def file_state(location: str) -> str:
    """A URL as it is (its content is only known by reading it); a file's size and mtime; a
    folder's files, each so."""
    if is_url(location):
        return location
    path = Path(location)
    if not path.exists():
        return f"{path}: missing"  # the stage itself reports the missing file
    if path.is_dir():
        return ";".join(file_state(str(p)) for p in sorted(path.rglob("*")) if p.is_file())
    stat = path.stat()
    return f"{path}:{stat.st_size}:{stat.st_mtime_ns}"


def source_asset(location: str) -> Asset:
    """A raw input: a URL as it is, a file as file://<absolute path>."""
    uri = location if is_url(location) else f"file://{Path(location).resolve()}"
    return asset(uri, Path(urlparse(uri).path).name, f"raw input {location}")


def table_names(con: duckdb.DuckDBPyConnection) -> set[str]:
    return set(warehouse.query(con, "flows_table_names")["table_name"])


def tracking_host(tracking_uri: str) -> str:
    """host:port of an http tracking URI; the store's path for a sqlite/file one."""
    parsed = urlparse(tracking_uri)
    return parsed.netloc or parsed.path.lstrip("/")


class Resource:
    """Something a stage reads or writes. Subclasses say what it is; these defaults suit an
    external input that a stage checks itself."""

    name: str

    def assets(self, settings: Settings, report: Any = None) -> list[Asset]:
        raise NotImplementedError

    def cache_input(self, settings: Settings) -> Any:
        """What a reading stage's cache key records: the content, or a proxy for it."""
        raise NotImplementedError

    def present(self, settings: Settings) -> bool:
        return True

    def applies(self, settings: Settings) -> bool:
        """Whether a stage that declares it writes it with these settings."""
        return True

    def location(self, settings: Settings) -> Path | None:
        """A path the reading stage is given as a keyword argument named after the resource;
        None for what the stage finds through the settings (warehouse tables, sources)."""
        return None

    def facts(self, settings: Settings, report: Any) -> dict[str, Any]:
        """Asset metadata after a stage wrote it (rows, digest, …)."""
        return {}

    def links(self, report: Any) -> str:
        """Markdown links for the lineage table (where a person sees it in another UI)."""
        return ""

    # Late resources are named by the stage's result (a registry assigns the version number), so
    # they are materialised by a second task once the stage has returned.
    late: bool = False
    # In the DuckDB warehouse: a stage writing it holds the warehouse slot
    # (deepsummit/flows/runner.py).
    in_warehouse: bool = False

    @property
    def tables(self) -> tuple[str, ...]:
        """The warehouse tables it is kept in."""
        return ()

    # What to run when it is missing, for a resource no stage of a chain writes.
    missing_hint: str = ""
