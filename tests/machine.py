"""Tests that need something of the machine (root, `unshare`, a mount, PostgreSQL): skipped
where it is missing, except in CI (the environment variable CI set, and not "0" or "false"),
where such a test fails with the reason: a CI run that skipped the fault tests would pass
without having run them. CUDA-only tests are not of these: CI machines here have no GPU.

Loaded as a plugin by tests/conftest.py. A module declares its need with the marker
`@pytest.mark.needs_machine(what, missing)`, `missing` the reason it is missing or None; a
fixture that finds out only by trying calls `require(what, missing)`."""

from __future__ import annotations

import os

import pytest

MARKER = "needs_machine"


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false")


def require(what: str, missing: str | None) -> None:
    """Go on when `missing` is None; else skip the test, or fail it in CI, saying why."""
    if missing is None:
        return
    reason = f"needs {what}: {missing}"
    if in_ci():
        pytest.fail(f"{reason} (CI is set: a test it cannot run fails)", pytrace=False)
    pytest.skip(reason)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(what, missing): needs `what` of the machine, `missing` why it is not here "
        "(None: it is); skipped without it, failed in CI (tests/machine.py)",
    )


@pytest.hookimpl(tryfirst=True)  # before the test's fixtures start what it needs
def pytest_runtest_setup(item: pytest.Item) -> None:
    for marker in item.iter_markers(MARKER):
        require(*marker.args)
