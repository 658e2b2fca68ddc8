"""A stage's cache key (deepsummit/flows/runner.py runs the stage under it): the stage's name
and its cache inputs (Prefect's INPUTS policy) plus the runner's own source (TASK_SOURCE).

The cache inputs are everything that determines the stage's output: the content (or a proxy
that changes with it) of each resource it reads, the settings it declares (without their
operational fields), where its outputs go, and the code of the stage's module with every
`deepsummit` module it imports, transitively, and the SQL files. A changed input changes the
key, so it is never served from the cache; a stage whose output is gone is recomputed even when
its key is cached.
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import asdict, is_dataclass
from functools import cache
from pathlib import Path
from typing import Any

from prefect.cache_policies import INPUTS, TASK_SOURCE

import deepsummit
from deepsummit.core.config import Settings
from deepsummit.core.sections import Section
from deepsummit.core.warehouse import sql_files
from deepsummit.flows.resources import RESOURCES
from deepsummit.flows.stages import Stage, outputs

# The Settings object and the run context differ from run to run without changing the result.
STAGE_CACHE = INPUTS - "settings" - "run" + TASK_SOURCE
# The package whose modules enter a stage's code digest (the stage module and what it imports).
PACKAGE_DIR = Path(deepsummit.__file__).parent


def _module_file(name: str) -> Path | None:
    """The source file of a project module (`deepsummit.weather` →
    deepsummit/weather/__init__.py)."""
    if name.split(".")[0] != PACKAGE_DIR.name:
        return None
    base = PACKAGE_DIR.parent.joinpath(*name.split("."))
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
    """sha256 over the project code `module` imports, transitively, and the SQL files: a change
    to a stage's code recomputes that stage (and not the others)."""
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
    for path in sorted(seen):
        digest.update(str(path.relative_to(PACKAGE_DIR)).encode())
        digest.update(path.read_bytes())
    for statement in sql_files():
        digest.update(statement.name.encode())
        digest.update(statement.read_bytes())
    return digest.hexdigest()


def setting_value(settings: Settings, dotted: str) -> Any:
    """A declared setting as JSON (a section without its operational fields)."""
    value: Any = settings
    for part in dotted.split("."):
        value = getattr(value, part)
    if isinstance(value, Section):
        return value.result_settings()
    return asdict(value) if is_dataclass(value) else value


def read_state(stage: Stage, name: str, settings: Settings) -> Any:
    """What the cache key records of one read: "absent" for an optional read that is."""
    resource = RESOURCES[name]
    if name in stage.optional and not resource.present(settings):
        return "absent"
    return resource.cache_input(settings)


def cache_inputs(stage: Stage, settings: Settings) -> dict[str, Any]:
    """Everything that determines what `stage` produces (see the module docstring)."""
    return {
        "code": code_digest(stage.module),
        "reads": {name: read_state(stage, name, settings) for name in stage.reads},
        "settings": {path: setting_value(settings, path) for path in stage.settings},
        "writes": [
            asset.key
            for resource in outputs(stage, settings)
            if not resource.late
            for asset in resource.assets(settings)
        ],
    }
