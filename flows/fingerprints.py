"""What determines each stage's output, as a small JSON-able dict: the stages' cache inputs.

A task's cache key is the hash of its fingerprint (Prefect's INPUTS policy) plus the task's source
(TASK_SOURCE). The fingerprint names everything the stage reads: the files (size and mtime) or the
warehouse tables (content digest), the settings section that steers it, and the code of
`pipeline/`, `model/` and `sql/` (TASK_SOURCE alone only covers the thin wrapper). A changed input
changes the key, so it is never served from the cache.
"""

from __future__ import annotations

import ast
import hashlib
from functools import cache
from pathlib import Path
from typing import Any

import duckdb

from flows.assets import CLEAN_TABLES, RECORD_SOURCES
from pipeline import warehouse
from pipeline.config import PROJECT_ROOT, SQL_DIR, Settings, is_url
from pipeline.warehouse import connect
from pipeline.weather import store as weather_store

Fingerprint = dict[str, Any]


PROJECT_PACKAGES = ("pipeline", "model")


def _module_file(name: str) -> Path | None:
    """The source file of a project module (`pipeline.weather` → pipeline/weather/__init__.py)."""
    if name.split(".")[0] not in PROJECT_PACKAGES:
        return None
    base = PROJECT_ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def _imports(path: Path) -> set[str]:
    """Project modules `path` imports (at any depth of its code, e.g. inside functions)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


@cache
def code_digest(module: str) -> str:
    """sha256 over the project code `module` imports, transitively, and the SQL files.

    TASK_SOURCE alone covers only the thin task wrapper; with this, a change to a stage's code
    recomputes that stage (and not the others: editing the services code reuses every stage).
    """
    seen: set[Path] = set()
    queue = [module]
    while queue:
        name = queue.pop()
        path = _module_file(name)
        if path is None or path in seen:
            continue
        seen.add(path)
        queue.extend(_imports(path))
        parts = name.split(".")  # importing a.b.c runs a/__init__ and a/b/__init__ too
        queue.extend(".".join(parts[:n]) for n in range(1, len(parts)))
    digest = hashlib.sha256()
    for path in sorted(seen) + sorted(SQL_DIR.glob("*.sql")):
        digest.update(str(path.relative_to(PROJECT_ROOT)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def file_fingerprint(location: str) -> str:
    """A URL as it is (its content is only known by reading it); a file's size and mtime."""
    if is_url(location):
        return location
    path = Path(location)
    if not path.exists():
        return f"{path}: missing"  # the stage itself reports the missing file
    if path.is_dir():
        return ";".join(file_fingerprint(str(p)) for p in sorted(path.rglob("*")) if p.is_file())
    stat = path.stat()
    return f"{path}:{stat.st_size}:{stat.st_mtime_ns}"


def table_digests(settings: Settings, tables: tuple[str, ...]) -> dict[str, str]:
    """Content digests of warehouse tables ("missing" for one that is not there)."""
    if not settings.paths.warehouse.exists():
        return dict.fromkeys(tables, "missing")
    with connect(settings.paths.warehouse, read_only=True) as con:
        present = table_names(con)
        return {table: _content_digest(con, table, present) for table in tables}


def table_names(con: duckdb.DuckDBPyConnection) -> set[str]:
    return set(warehouse.query(con, "flows_table_names")["table_name"])


def _content_digest(con: duckdb.DuckDBPyConnection, table: str, present: set[str]) -> str:
    if table not in present:
        return "missing"
    if table == "weather_daily":  # without fetch times: a refetch of the same values is no change
        return weather_store.content_digest(con)[1]
    return warehouse.table_digest(con, table)


def _base(settings: Settings, module: str) -> Fingerprint:
    return {"code": code_digest(module), "warehouse": str(settings.paths.warehouse)}


def ingest_fingerprint(settings: Settings) -> Fingerprint:
    locations = {
        name: settings.data_location(loc)
        for name in RECORD_SOURCES
        if (loc := getattr(settings.sources, name))
    }
    return {
        **_base(settings, "pipeline.ingest"),
        "sources": {name: file_fingerprint(loc) for name, loc in locations.items()},
    }


def weather_fingerprint(settings: Settings) -> Fingerprint:
    config = settings.weather.model_dump(mode="json", exclude={"cache_path", "limits", "timeout_s"})
    if config["source"] == "archive":
        config["archive"] = file_fingerprint(settings.data_location(settings.weather.archive_path))
    return {
        **_base(settings, "pipeline.weather"),
        "tables": table_digests(settings, CLEAN_TABLES),
        "weather": config,
    }


def features_fingerprint(settings: Settings) -> Fingerprint:
    return {
        **_base(settings, "pipeline.features"),
        "tables": table_digests(settings, (*CLEAN_TABLES, "weather_daily")),
        "weather_source": settings.weather.source,
        "features": settings.features.model_dump(mode="json"),
    }


def train_fingerprint(settings: Settings, features_dir: Path) -> Fingerprint:
    return {
        **_base(settings, "pipeline.train_stage"),
        "features": file_fingerprint(str(features_dir)),
        "model": settings.model.model_dump(mode="json"),
        "train": settings.train.model_dump(mode="json", exclude={"checkpoint_dir"}),
        "mlflow": settings.mlflow.model_dump(mode="json"),
    }
