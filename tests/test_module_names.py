"""No module of the package is named like a module of the standard library. Prefect puts a
flow file's folder on `sys.path`, and a process spawned from a flow run inherits it, so a
`flows/resource.py` once stood in for the standard `resource` there: the train stage's refit
process died at import, again and again."""

from __future__ import annotations

import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "deepsummit"


def test_no_module_shadows_the_standard_library() -> None:
    names = {path.stem for path in PACKAGE.rglob("*.py")} | {
        path.name for path in PACKAGE.rglob("*") if (path / "__init__.py").exists()
    }
    assert not names & set(sys.stdlib_module_names)
