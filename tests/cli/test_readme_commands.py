"""Every `deepsummit …` command line the README and the pages of docs/ show exists, with every
option it uses, and the README's command table names every command: the documentation cannot
drift from the CLI again."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from deepsummit.cli.app import app
from deepsummit.core.sections import PROJECT_ROOT

README = PROJECT_ROOT / "README.md"
DOCUMENTS = [README, *sorted((PROJECT_ROOT / "docs").glob("*.md"))]


def command_lines(text: str) -> list[str]:
    """`deepsummit …` in inline code and at the start of code-block lines (continuations
    joined)."""
    found = re.findall(r"`(deepsummit [^`]+)`", text)
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip().startswith("deepsummit "):
                found.append(line.strip())
    return sorted(set(found))


def usage(line: str) -> tuple[list[str], list[str]]:
    """(the command path, the --options the line uses): options in brackets and alternatives
    (`[--weather-source archive|open-meteo]`) count as used."""
    words = shlex.split(line.replace("[", " ").replace("]", " ").replace("\\|", "|"))[1:]
    options = [w.split("=")[0] for w in words if w.startswith("--")]
    path = []
    for word in words:
        if word.startswith("-"):
            break
        path.append(word)
    return path, options


def name(document: Path) -> str:
    return document.relative_to(PROJECT_ROOT).as_posix()


LINES = [
    (name(document), line) for document in DOCUMENTS for line in command_lines(document.read_text())
]


def test_the_readme_shows_the_commands() -> None:
    lines = command_lines(README.read_text())
    assert len(lines) > 10
    assert any(line.startswith("deepsummit outlook --peak") for line in lines)
    assert any(line.startswith("deepsummit predict --peak") for line in lines)


def test_the_readme_s_command_table_names_every_command() -> None:
    readme = README.read_text()
    names = [
        command.name or command.callback.__name__.replace("_", "-")
        for command in app.registered_commands
        if command.callback is not None and not command.hidden
    ]
    assert "main-job" in names
    missing = [n for n in names if f"| `deepsummit {n}" not in readme]
    assert missing == [], f"README.md's command table lacks {missing}"


@pytest.mark.parametrize(
    ("document", "line"), LINES, ids=[f"{document}: {line}" for document, line in LINES]
)
def test_each_command_line_runs_with_help_and_knows_its_options(document: str, line: str) -> None:
    path, options = usage(line)
    result = CliRunner().invoke(app, [*[p for p in path if not p.isupper()], "--help"])
    assert result.exit_code == 0, f"{document}: {line!r}: {result.output}"
    text = re.sub(r"\s+", " ", re.sub(r"\x1b\[[0-9;]*m", "", result.output))
    for option in options:
        if option == "--help":
            continue
        found = re.search(rf"{re.escape(option)}\b", text)
        assert found, f"{document}: {line!r}: no option {option}"
