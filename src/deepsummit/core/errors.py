"""Errors a person can act on: each carries one line that names the input and the reason.

The class says what kind of failure it is, so that a script driving `deepsummit` can tell them
apart: the command line maps each class to its exit code (deepsummit/cli/exit_codes.py).
"""


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
