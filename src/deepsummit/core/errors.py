"""Errors a person can act on: each carries one line that names the input and the reason.

The class says what kind of failure it is, so that a script driving `deepsummit` can tell them
apart: the command line maps each class to its exit code (deepsummit/cli/exit_codes.py).
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# How DuckDB reports ENOSPC: its errors carry the OS's message, not the errno.
_NO_SPACE_MESSAGE = "No space left on device"


class PipelineError(Exception):
    """A stage cannot go on; `str(error)` is the one line the CLI prints before exiting."""


class BadInput(PipelineError):
    """What a person gave cannot be used (an option, a file, a date, a peak): the same command
    fails the same way until the input is fixed."""


class ServiceUnavailable(PipelineError):
    """Something the command needs does not answer or is not there yet (a server, the
    registry's champion, a remote source): start it, or try again later."""


class QuotaExhausted(PipelineError):
    """The weather API refused further calls; what was fetched is stored, the rest is pending."""


class _SourceError(PipelineError):
    """One source (a file or URL) and why it could not be read."""

    def __init__(self, location: str, reason: str) -> None:
        super().__init__(f"{location}: {reason}")
        self.location = location
        self.reason = reason


class SourceUnreadable(_SourceError, BadInput):
    """An input cannot be read at all (missing file, bad gzip, no header, a missing column…)."""


class SourceUnavailable(_SourceError, ServiceUnavailable):
    """A source URL's server does not answer, or stays busy through every retry."""


class ServiceError(ServiceUnavailable):
    """A local service did not start, did not become healthy, or its port is taken
    (deepsummit/services/)."""


class DiskFull(PipelineError):
    """A write ran out of disk space. Each writer writes whole or not at all, so what was there
    before is kept: free some space and run the command again."""


def exception_chain(error: BaseException) -> Iterator[BaseException]:
    """`error`, then the error it was raised from or while handling, and so on."""
    seen: set[int] = set()
    link: BaseException | None = error
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        link = link.__cause__ or link.__context__


def _out_of_space(error: BaseException) -> bool:
    """Whether `error`, or an error of its chain, is ENOSPC (torch reports a failed write as a
    RuntimeError raised while handling the OSError)."""
    return any(
        (isinstance(link, OSError) and link.errno == errno.ENOSPC) or _NO_SPACE_MESSAGE in str(link)
        for link in exception_chain(error)
    )


@contextmanager
def disk_space_for(what: str, path: Path) -> Iterator[None]:
    """Inside the block, an error caused by a full disk becomes DiskFull: one line naming what
    could not be written and where; any other error passes unchanged."""
    try:
        yield
    except Exception as error:
        if not _out_of_space(error):
            raise
        raise DiskFull(
            f"{path}: the disk is full, {what} could not be written; nothing was changed there,"
            " free some space and run again"
        ) from error
