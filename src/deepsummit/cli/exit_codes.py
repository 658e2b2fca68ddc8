"""The exit codes of `deepsummit`, each error class of deepsummit/core/errors.py mapped to one,
here and nowhere else: a script tells bad input (fix it) from a service that is down or a quota
spent (try again later) by the code alone.
"""

from __future__ import annotations

from enum import IntEnum

from deepsummit.core.errors import BadInput, QuotaExhausted, ServiceUnavailable


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1
    BAD_INPUT = 2  # click exits 2 on a usage error of its own: bad input as well
    SERVICE_UNAVAILABLE = 3
    QUOTA_SPENT = 4


MEANINGS = {
    ExitCode.OK: "done",
    ExitCode.FAILED: "a stage could not go on (the error line says why), or a bug",
    ExitCode.BAD_INPUT: "an option, file, date or peak that cannot be used (usage errors too)",
    ExitCode.SERVICE_UNAVAILABLE: "a service down, no champion yet, or a source not answering",
    ExitCode.QUOTA_SPENT: "the weather API's quota is spent (what was fetched is kept)",
}

# The first class of an error's MRO found here gives its code; any other error is FAILED.
_BY_ERROR: dict[type[Exception], ExitCode] = {
    BadInput: ExitCode.BAD_INPUT,
    ServiceUnavailable: ExitCode.SERVICE_UNAVAILABLE,
    QuotaExhausted: ExitCode.QUOTA_SPENT,
}


def label(code: ExitCode) -> str:
    """The code and its name, e.g. "3 service unavailable"."""
    return f"{code.value} {code.name.lower().replace('_', ' ')}"


def describe(code: ExitCode) -> str:
    """One line of the table, e.g. "3 service unavailable: a service down, …"."""
    return f"{label(code)}: {MEANINGS[code]}"


def exit_code(error: BaseException) -> ExitCode:
    """The code a command that failed with `error` exits with."""
    for kind in type(error).__mro__:
        if kind in _BY_ERROR:
            return _BY_ERROR[kind]
    return ExitCode.FAILED
