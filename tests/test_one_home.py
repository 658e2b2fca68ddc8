"""Concepts declared once: a second spelling of one, anywhere in the package, fails here and
names its only home. (ruff's PIE794 keeps a class field from being declared twice.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "deepsummit"

# concept → (a pattern of its spelling, the one file allowed to hold it; None: no file, it is a
# type now)
HOMES: dict[str, tuple[str, str | None]] = {
    "the seasons' order": (r"[\"']Spring[\"'],\s*[\"']Summer[\"']", "core/seasons.py"),
    "a season's rank": (r"\*\s*(?:4|len\(SEASONS\))\s*\+", "core/seasons.py"),
    "whether a location is a URL": (r"startswith\(\(?[\"']https?://", "core/sections.py"),
    "a path setting resolved against the project": (r"def _absolute\(", None),
    "the member groups": (r"lit\([\"']60 and over", "contracts/member_groups.py"),
}


def spellings(pattern: str) -> dict[str, int]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        count = len(re.findall(pattern, path.read_text()))
        if count:
            found[str(path.relative_to(PACKAGE))] = count
    return found


@pytest.mark.parametrize("concept", HOMES)
def test_each_concept_has_one_home(concept: str) -> None:
    pattern, home = HOMES[concept]
    found = spellings(pattern)
    assert set(found) <= {home}, f"{concept}: spelt in {sorted(found)}, its home is {home}"


def test_the_patterns_find_their_homes() -> None:
    """Each pattern still matches where the concept lives, else the test above proves nothing."""
    for concept, (pattern, home) in HOMES.items():
        if home is not None:
            assert home in spellings(pattern), concept
