"""The README is for users: short enough to read in ten minutes, its sections in the order a
newcomer needs them, and no history (commit hashes, issue numbers): that lives in CHANGELOG.md
and docs/."""

from __future__ import annotations

import re

import pytest

from deepsummit.core.sections import PROJECT_ROOT

README = PROJECT_ROOT / "README.md"
MAX_LINES = 250
# The sections, in the order a newcomer reads them.
HEADINGS = [
    "## What it is, and what it is not",
    "## The two commands",
    "## Live sources",
    "## Scaling out",
    "## How good it is",
    "## Examples",
    "## Commands",
    "## Documentation",
]
# A commit hash as a word: 7 to 40 hex digits with at least one letter a–f and one digit.
COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
ISSUE = re.compile(r"\bissues?\s+#?\d+|(?<![\w&])#\d+\b", re.IGNORECASE)


def commit_hashes(text: str) -> list[str]:
    return COMMIT.findall(text)


def issue_references(text: str) -> list[str]:
    return ISSUE.findall(text)


def test_the_readme_reads_in_ten_minutes() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines, at most {MAX_LINES}"


def test_the_readme_names_no_commit() -> None:
    assert commit_hashes(README.read_text()) == []


def test_the_readme_names_no_issue() -> None:
    assert issue_references(README.read_text()) == []


def test_the_readme_s_sections_come_in_order() -> None:
    headings = [line for line in README.read_text().splitlines() if line.startswith("## ")]
    assert headings == HEADINGS


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("at 7b2f661 it took", ["7b2f661"]),
        ("commit " + "2093" * 10, []),  # no letter: a number, however long
        ("commit " + "20933b2f" * 5, ["20933b2f" * 5]),
        ("1,173 s and 2024-12-31", []),
        ("deadbeef", []),  # no digit: a word, not a hash
        ("1234567", []),  # no letter: a number
        ("abc1234x", []),  # not a word of its own
        ("sha256 of `deepsummit`", []),
    ],
)
def test_what_counts_as_a_commit_hash(text: str, found: list[str]) -> None:
    assert commit_hashes(text) == found


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("the targets of issue 42", ["issue 42"]),
        ("issues 41 and 42", ["issues 41"]),
        ("Issue #40's target", ["Issue #40"]),
        ("see #40", ["#40"]),
        ("0 ok, 1 failed, 2 bad input", []),
        ("[the protocol](#the-protocol)", []),
        ("&#40;", []),
    ],
)
def test_what_counts_as_an_issue_reference(text: str, found: list[str]) -> None:
    assert issue_references(text) == found
