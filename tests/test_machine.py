"""A test that needs something of the machine (tests/machine.py) is skipped where it is
missing, and fails with the reason where CI is set; the marker and `require` alike."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

NEEDS = """
import pytest
from machine import require

@pytest.mark.needs_machine("PostgreSQL", "no server under /usr/lib/postgresql")
def test_marked():
    pass

@pytest.mark.needs_machine("PostgreSQL", None)
def test_marked_and_there():
    pass

def test_required():
    require("a small tmpfs mounted to fill (root)", "mount: permission denied")
"""


SKIPPED = (
    {"passed": 1, "skipped": 2},
    [
        "SKIPPED *needs PostgreSQL: no server under /usr/lib/postgresql",
        "SKIPPED *needs a small tmpfs mounted to fill (root): mount: permission denied",
    ],
)
FAILED = (
    {"passed": 1, "errors": 1, "failed": 1},
    [
        "FAILED *test_required - Failed: needs a small tmpfs mounted to fill (root): mount:*",
        "ERROR *test_marked - Failed: needs PostgreSQL: no server under /usr/lib/postgresql*",
    ],
)


@pytest.mark.parametrize(
    ("ci", "outcomes", "lines"),
    [(ci, *SKIPPED) for ci in ("", "0", "false", "FALSE")]
    + [(ci, *FAILED) for ci in ("true", "1", "yes")],
)
def test_a_missing_need_skips_with_its_reason_and_fails_with_it_where_ci_is_set(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    ci: str,
    outcomes: dict[str, int],
    lines: list[str],
) -> None:
    monkeypatch.setenv("CI", ci)
    pytester.makepyfile(NEEDS)

    result = pytester.runpytest("-p", "machine", "-rsfE")

    result.assert_outcomes(**outcomes)
    result.stdout.fnmatch_lines(lines)
