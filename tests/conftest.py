"""Session-wide test settings: quiet, offline, and never touching the developer's var/ folder."""

import os
import shutil
import sys
import tempfile

import pytest
from session_shared import SHARED_DIR_VARIABLE

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
pytest.register_assert_rewrite("training_fixtures", "services_fixtures")

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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules marked `long` first, the others after them in their own order. `make test`
    hands whole modules to its workers in this order (`--no-loadscope-reorder`): the short
    ones then fill the end of the run on both workers. xdist's own order, most tests first,
    left the one-test modules of a minute or two to the end, on one worker while the other
    had nothing left to do."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


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
