"""Reading a source's bytes from a file path or an http(s) URL, gzip detected by magic bytes."""

from __future__ import annotations

import gzip
import urllib.error
import urllib.request
import zlib
from pathlib import Path

from deepsummit.core.errors import SourceUnavailable, SourceUnreadable
from deepsummit.core.http_retry import send
from deepsummit.core.sections import is_url

GZIP_MAGIC = b"\x1f\x8b"
DEFAULT_TIMEOUT_S = 60.0


def read_bytes(location: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> bytes:
    """The content at `location`, decompressed when it is gzip (whatever its name says).

    Raises SourceUnreadable (one line naming the location) when it cannot be read at all.
    """
    data = _fetch(location, timeout_s) if is_url(location) else _read_file(location)
    if data.startswith(GZIP_MAGIC):
        try:
            return gzip.decompress(data)
        except (EOFError, OSError, zlib.error) as error:
            raise SourceUnreadable(location, f"truncated or corrupt gzip ({error})") from None
    return data


def _read_file(location: str) -> bytes:
    path = Path(location)
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise SourceUnreadable(location, "no such file") from None
    except IsADirectoryError:
        raise SourceUnreadable(location, "is a directory, not a file") from None
    except OSError as error:
        raise SourceUnreadable(location, f"cannot read ({error.strerror})") from None


def _fetch(url: str, timeout_s: float) -> bytes:
    request = urllib.request.Request(url, headers={"User-Agent": "deepsummit-ingest"})
    try:
        _, data = send(request, timeout_s)  # a busy server's 429/502/503/504 are retried
        return data
    except urllib.error.HTTPError as error:
        # 4xx: the URL is wrong or refused; 5xx: the server is down or busy for good.
        failure = SourceUnreadable if error.code < 500 else SourceUnavailable
        raise failure(url, f"HTTP {error.code} {error.reason}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise SourceUnavailable(url, f"cannot fetch ({reason})") from None
