"""docs/cli.md, the command-line reference: the `--help` of `deepsummit` and of each command as a
terminal 100 columns wide shows it. `python -m deepsummit.cli.reference` (`make cli-docs`) writes
it; tests/cli/test_reference.py fails while the committed file is not what this writes.

The helps are rendered in a process of their own whose width and colours are fixed, so that the
file is the same whatever terminal, or none, runs this.
"""

from __future__ import annotations

import os
import subprocess
import sys

import typer

from deepsummit.cli.app import app
from deepsummit.core.sections import PROJECT_ROOT

REFERENCE = PROJECT_ROOT / "docs" / "cli.md"
WIDTH = 100
_SEPARATOR = "\x1e"  # between two helps in the renderer's output (ASCII record separator)
_RENDERER = f"""
import sys
from deepsummit.cli.app import app
for command in sys.argv[1:]:
    print({_SEPARATOR!r}, flush=True)
    try:
        app([*command.split(), "--help"], prog_name="deepsummit")
    except SystemExit:
        pass
"""


def command_names() -> list[str]:
    """The commands, in the order `deepsummit --help` lists them."""
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    return [name for name, command in group.commands.items() if not command.hidden]


def helps(commands: list[str]) -> list[str]:
    """The `--help` text of each command ("" for `deepsummit` itself)."""
    environment = {
        **{k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TERMINAL_WIDTH")},
        "COLUMNS": str(WIDTH),
        "NO_COLOR": "1",
        "TERM": "dumb",
    }
    rendered = subprocess.run(
        [sys.executable, "-c", _RENDERER, *commands],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    texts = rendered.split(_SEPARATOR + "\n")[1:]
    return ["\n".join(line.rstrip() for line in text.strip("\n").splitlines()) for text in texts]


def render() -> str:
    """The reference as Markdown: one section per command, its help in a text block."""
    commands = ["", *command_names()]
    lines = [
        "# The `deepsummit` command line",
        "",
        "Each command's `--help`, written by `python -m deepsummit.cli.reference` (`make "
        "cli-docs`); do not edit by hand.",
        "",
    ]
    for command, text in zip(commands, helps(commands), strict=True):
        title = f"deepsummit {command}".strip()
        lines += [f"## `{title}`", "", "```text", text, "```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    REFERENCE.write_text(render())
    print(f"wrote {REFERENCE}")
