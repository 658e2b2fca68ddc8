"""`deepsummit`: run each stage by hand as its Prefect flow, manage the local services, and run
the main job. Every path, URL, the warehouse, the tracking URI and the profile are options whose
defaults come from deepsummit.toml (see deepsummit/core/config.py); an option given here wins.

A stage command uses the local Prefect server when `deepsummit up` runs it (the run shows in its
UI), and Prefect's temporary in-process server otherwise.

For scripts: a failure prints one line on stderr (`error: …`) and exits with the code of its
kind, each error class of deepsummit/core/errors.py mapped to one in deepsummit/cli/exit_codes.py:

    0 ok: done
    1 failed: a stage could not go on (the error line says why), or a bug
    2 bad input: an option, file, date or peak that cannot be used (usage errors too)
    3 service unavailable: a service down, no champion yet, or a source not answering
    4 quota spent: the weather API's quota is spent (what was fetched is kept)

`predict`, `outlook` and `status` take `--json`: one JSON document on stdout, nothing else there
(logs and progress go to stderr). `status` exits 3 while a service it manages is not healthy, so
it serves as a health check. `--version` also names the champion's version. Shell completion:
`deepsummit --install-completion`. docs/cli.md is this help, written by
`python -m deepsummit.cli.reference`.

Heavy packages (torch, MLflow, Prefect, Great Expectations) are imported by the commands that
use them, never here: `--help`, `status` and `predict` do not pay for what they do not run.
"""

from __future__ import annotations

from deepsummit.cli.common import app

# Each module registers its commands on the app (their decorators, on import), in the order
# `deepsummit --help` lists them.
# isort: off
from deepsummit.cli import stages  # noqa: F401
from deepsummit.cli import local  # noqa: F401
from deepsummit.cli import serving  # noqa: F401
# isort: on

__all__ = ["app"]

if __name__ == "__main__":
    app()
