"""Errors a person can act on: each carries one line that names the input and the reason."""


class PipelineError(Exception):
    """A stage cannot go on; `str(error)` is the one line the CLI prints before exiting 1."""


class SourceUnreadable(PipelineError):
    """An input cannot be read at all (missing file, bad gzip, no header, a missing column…)."""

    def __init__(self, location: str, reason: str) -> None:
        super().__init__(f"{location}: {reason}")
        self.location = location
        self.reason = reason


class QuotaExhausted(PipelineError):
    """The weather API refused further calls; what was fetched is stored, the rest is pending."""
