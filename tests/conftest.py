"""Session-wide test settings: quiet, offline, and never touching the developer's var/ folder."""

import os
import shutil
import sys
import tempfile
from typing import Any

import pytest
from session_shared import SHARED_DIR_VARIABLE

# A test that needs root, `unshare`, a mount or PostgreSQL fails in CI where the machine lacks
# it, rather than skipping (tests/machine.py).
pytest_plugins = ["machine"]

# Set before any test module imports prefect, mlflow or matplotlib.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
os.environ.setdefault("TQDM_DISABLE", "1")

# Plugin modules that test modules also import (for types and helpers): rewrite their asserts on
# that first import, not only when `pytest_plugins` names them.
pytest.register_assert_rewrite("training_fixtures", "services_fixtures", "remote_worker")

# A sender whose server is gone retries each queued item for about a minute: bound the wait.
SENDER_DRAIN_TIMEOUT_S = 10.0


def pytest_configure(config: pytest.Config) -> None:
    """The controlling process makes the session's shared folder (tests/session_shared.py);
    the workers it starts inherit its name."""
    if not hasattr(config, "workerinput"):
        os.environ[SHARED_DIR_VARIABLE] = tempfile.mkdtemp(prefix="deepsummit-tests-")


def pytest_unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        shutil.rmtree(os.environ.pop(SHARED_DIR_VARIABLE), ignore_errors=True)


# The modules that share the session's `services_stack` (tests/services_fixtures.py): handed
# to one worker as one unit, so the session starts one stack, not one on each worker that
# happens to get one of them (an `up` and its `down` cost about 28 s of CPU, and an idle
# stack 4 s a minute until the session ends).
SHARED_STACK_FIXTURE = "services_stack"
SHARED_STACK_MODULES = frozenset(
    {
        "tests/flows/test_checked_worker.py",
        "tests/flows/test_handover.py",
        "tests/flows/test_training_ends.py",
        "tests/flows/test_tune_storage.py",
        "tests/services/test_alerts.py",
        "tests/services/test_deploy.py",
        "tests/services/test_supervisor.py",
    }
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules marked `long` first, the others after them in their own order. `make test`
    hands whole modules to its workers in this order (`--no-loadscope-reorder`): the short
    ones then fill the end of the run on every worker. xdist's own order, most tests first,
    left the one-test modules of a minute or two to the end, on one worker while the others
    had nothing left to do. A module that uses the shared stack without being listed in
    SHARED_STACK_MODULES stops the collection: on a worker of its own it would start a second
    stack."""
    unlisted = {
        item.nodeid.split("::")[0]
        for item in items
        if SHARED_STACK_FIXTURE in getattr(item, "fixturenames", ())
    } - SHARED_STACK_MODULES
    if unlisted:
        raise pytest.UsageError(
            f"{sorted(unlisted)} use {SHARED_STACK_FIXTURE}: add them to SHARED_STACK_MODULES"
        )
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, absent with -p no:xdist
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With `--dist loadfile`: each module a unit of work, as xdist makes them, except the
    modules of SHARED_STACK_MODULES, which are one unit."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedStackTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = super()._split_scope(nodeid)
            return SHARED_STACK_FIXTURE if module in SHARED_STACK_MODULES else module

    return SharedStackTogether(config, log)


@pytest.fixture(scope="module", autouse=True)
def prefect_senders_of_this_module() -> None:
    """Prefect's in-process event and log senders live as long as the process, not as long as
    a server: each keeps the connection it opened to the server of the module that first sent
    through it, and would send this module's task runs and logs there. A module starts with
    none (the next event opens a sender to this module's server)."""
    if "prefect" not in sys.modules:
        return  # nothing imported Prefect yet: no sender exists
    from prefect._internal.concurrency.services import _QueueServiceBase

    _QueueServiceBase.drain_all(timeout=SENDER_DRAIN_TIMEOUT_S)
