"""Every `deepsummit …` command line the README shows exists, with every option it uses: the
README cannot drift from the CLI again."""

from __future__ import annotations

import re
import shlex

import pytest
from typer.testing import CliRunner

from deepsummit.cli.app import app
from deepsummit.core.config import PROJECT_ROOT

README = (PROJECT_ROOT / "README.md").read_text()


def readme_command_lines() -> list[str]:
    """`deepsummit …` in inline code and at the start of code-block lines (continuations
    joined)."""
    found = re.findall(r"`(deepsummit [^`]+)`", README)
    for block in re.findall(r"```[a-z]*\n(.*?)```", README, re.DOTALL):
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


LINES = readme_command_lines()


def test_the_readme_shows_the_commands() -> None:
    assert len(LINES) > 10
    assert any(line.startswith("deepsummit outlook --peak") for line in LINES)


@pytest.mark.parametrize("line", LINES)
def test_each_readme_command_runs_with_help_and_knows_its_options(line: str) -> None:
    path, options = usage(line)
    result = CliRunner().invoke(app, [*[p for p in path if not p.isupper()], "--help"])
    assert result.exit_code == 0, f"{line!r}: {result.output}"
    text = re.sub(r"\s+", " ", re.sub(r"\x1b\[[0-9;]*m", "", result.output))
    for option in options:
        if option == "--help":
            continue
        assert re.search(rf"{re.escape(option)}\b", text), f"{line!r}: no option {option}"
