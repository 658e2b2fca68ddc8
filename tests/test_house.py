"""The package's house limits: no module over 450 lines, no function over 60 lines but the few
named here with their reason, and no import cycle between modules."""

from __future__ import annotations

import ast
from collections import deque
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SOURCE / "deepsummit"

MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 60  # from the `def` line to the last, decorators left out

# "module:function" → why it reads best as one piece; at most three.
LONG_FUNCTIONS: dict[str, str] = {
    "deepsummit.records.expectations:clean_table_expectations": (
        "the ingest suite declared whole, one expectation a line"
    ),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(SOURCE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: dict[str, Path] = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def tree(module: str) -> ast.Module:
    return ast.parse(MODULES[module].read_text(), filename=str(MODULES[module]))


def imported(module: str) -> set[str]:
    """The package's modules `module` imports anywhere in it (in functions and under
    TYPE_CHECKING too): `from a import b` counts as importing `a.b` where that is a module, else
    `a`; the parent packages Python imports on the way are not counted."""
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree(module)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            found |= {
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                for alias in node.names
            }
    return {name for name in found if name in MODULES and name != module}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (its modules in import order, the first repeated at the end) for each group of
    modules that import each other, directly or through others."""
    cycles, seen = [], set()
    for start in sorted(graph):
        if start in seen:
            continue
        # The shortest way back to `start`, by breadth-first search.
        came_from: dict[str, str] = {}
        queue = deque([start])
        while queue:
            module = queue.popleft()
            if start in graph[module]:
                path = [module]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                cycle = [*reversed(path), start]
                cycles.append(cycle)
                seen.update(cycle)
                break
            for following in sorted(graph[module]):
                if following not in came_from and following != start:
                    came_from[following] = module
                    queue.append(following)
    return cycles


def test_no_module_is_over_the_line_limit() -> None:
    lengths = {name: len(path.read_text().splitlines()) for name, path in MODULES.items()}
    over = {name: count for name, count in lengths.items() if count > MAX_MODULE_LINES}
    assert not over, f"over {MAX_MODULE_LINES} lines (split along a seam): {over}"


def test_long_functions_are_the_named_ones() -> None:
    assert len(LONG_FUNCTIONS) <= 3, "at most three functions may be over the limit"
    long = {}
    for module in MODULES:
        for node in ast.walk(tree(module)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{module}:{node.name}"] = lines
    unnamed = {name: lines for name, lines in long.items() if name not in LONG_FUNCTIONS}
    assert not unnamed, (
        f"over {MAX_FUNCTION_LINES} lines (extract helpers, or name it in LONG_FUNCTIONS with "
        f"its reason): {unnamed}"
    )


def test_the_named_long_functions_exist() -> None:
    """Each allowed long function is still there, else its entry allows the next one silently."""
    defined = {
        f"{module}:{node.name}"
        for module in MODULES
        for node in ast.walk(tree(module))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    assert set(LONG_FUNCTIONS) <= defined


def test_no_modules_import_each_other() -> None:
    graph = {module: imported(module) for module in MODULES}
    cycles = import_cycles(graph)
    assert not cycles, "import cycles (move what both need below both): " + "; ".join(
        " → ".join(cycle) for cycle in cycles
    )


def test_the_import_graph_finds_a_cycle() -> None:
    """The search above finds cycles, direct and through others, else it proves nothing."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"f"}, "f": {"e"}}
    assert import_cycles(graph) == [["a", "b", "c", "a"], ["e", "f", "e"]]
    assert "deepsummit.services.local" in imported("deepsummit.services.supervisor")
