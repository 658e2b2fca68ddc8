"""A generated secret kept in a file under the services' run folder: the Prefect server's
login (deepsummit/services/local.py) and the PostgreSQL role's password
(deepsummit/services/postgres.py)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from deepsummit.core.errors import ServiceError


def ensure_secret(path: Path, prefix: str = "") -> None:
    """Write a generated password to `path` once, readable by this user only (O_EXCL: never
    clobber one a running server already uses); refuse one that other users can read."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as file:
            file.write(f"{prefix}{secrets.token_urlsafe(32)}\n")
    if path.stat().st_mode & 0o077:
        raise ServiceError(
            f"{path} is readable by other users: `chmod 600 {path}`; if it may have leaked,"
            " `deepsummit down`, delete it and `deepsummit up` for a new one"
        )
