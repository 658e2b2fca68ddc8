"""docs/cli.md is what `python -m deepsummit.cli.reference` writes from the commands' --help:
a changed option or command fails here until the reference is written again."""

from __future__ import annotations

from deepsummit.cli.reference import REFERENCE, command_names, render


def test_the_committed_cli_reference_is_current() -> None:
    current = render()
    assert REFERENCE.read_text() == current, (
        "docs/cli.md is out of date: run `python -m deepsummit.cli.reference` (make cli-docs)"
    )
    for name in command_names():
        assert f"## `deepsummit {name}`" in current
        assert f"Usage: deepsummit {name} [OPTIONS]" in current
