"""PostgreSQL as the Prefect server's database and MLflow's backend store, the production
backends, run here: with `services.database = "postgresql"`, `deepsummit up` starts Debian's
PostgreSQL server (`apt-get install postgresql`) on one cluster under the services' run folder
before the two servers, and `down` stops it after them.

The cluster's role `deepsummit` has a password generated at the first `up`
(`<run_dir>/postgres-password`, mode 0600, never printed); the server listens on
`services.host` only and asks every TCP client for that password (scram-sha-256).
"""

from __future__ import annotations

import os
import subprocess
import urllib.parse
from pathlib import Path

from deepsummit.core.config import Settings
from deepsummit.core.errors import ServiceError
from deepsummit.services.secret_file import ensure_secret

POSTGRES = "postgres"  # the service's name: its PID and log files
ROLE = "deepsummit"
DATABASES = ("prefect", "mlflow")
INSTALLED = Path("/usr/lib/postgresql")  # Debian's server binaries, one folder per version
# PostgreSQL refuses to run as root. As root, it runs in a user namespace of its own, where it
# is an ordinary user (uid 1000 there) whose files are root's outside: nothing to chown, no
# system account needed, and it can still reach a cluster under a folder only root may enter.
AS_ORDINARY_USER = ["unshare", "--user", "--map-user=1000", "--map-group=1000"]


def server_bin() -> Path | None:
    """The folder of the newest installed PostgreSQL server, or None."""
    versions = [
        p.parent for p in INSTALLED.glob("*/bin/postgres") if p.parent.parent.name.isdigit()
    ]
    return max(versions, key=lambda p: int(p.parent.name)) if versions else None


def unavailable() -> str | None:
    """Why PostgreSQL cannot run here, or None when it can."""
    if server_bin() is None:
        return f"no PostgreSQL server under {INSTALLED} (apt-get install postgresql)"
    return None


def cluster_dir(settings: Settings) -> Path:
    return settings.services.run_dir / "postgres"


def _password(settings: Settings) -> str:
    path = settings.services.run_dir / "postgres-password"
    ensure_secret(path)
    return path.read_text().strip()


def connection_url(settings: Settings, database: str, driver: str = "postgresql") -> str:
    """The URL a client of `database` connects with (`postgresql+asyncpg` for Prefect)."""
    password = urllib.parse.quote(_password(settings), safe="")
    svc = settings.services
    return f"{driver}://{ROLE}:{password}@{svc.host}:{svc.postgres_port}/{database}"


def _command(name: str, *args: str) -> list[str]:
    binary = server_bin()
    if binary is None:
        raise ServiceError(f"services.database = postgresql: {unavailable()}")
    prefix = AS_ORDINARY_USER if os.geteuid() == 0 else []
    return [*prefix, str(binary / name), *args]


def prepare(settings: Settings) -> None:
    """Create the cluster once (its role and password; TCP clients need the password)."""
    data = cluster_dir(settings)
    if (data / "PG_VERSION").exists():
        return
    password = settings.services.run_dir / "postgres-password"
    _password(settings)
    _run(
        "initdb",
        _command(
            "initdb", "-D", str(data), "-U", ROLE, f"--pwfile={password}",
            "--auth-host=scram-sha-256", "--auth-local=trust", "-E", "UTF8",
        ),
    )  # fmt: skip


def server_command(settings: Settings) -> list[str]:
    data = cluster_dir(settings)
    svc = settings.services
    return _command(
        "postgres", "-D", str(data), "-h", svc.host, "-p", str(svc.postgres_port),
        "-k", str(data),  # its socket beside its files, not in /var/run/postgresql
    )  # fmt: skip


def healthy(settings: Settings) -> bool:
    svc = settings.services
    check = _command("pg_isready", "-q", "-h", svc.host, "-p", str(svc.postgres_port))
    return subprocess.run(check, capture_output=True, timeout=30).returncode == 0


def create_databases(settings: Settings) -> list[str]:
    """The databases of DATABASES that do not exist yet, created; their names."""
    listed = sql(settings, "SELECT datname FROM pg_database").split()
    missing = [name for name in DATABASES if name not in listed]
    for name in missing:
        sql(settings, f'CREATE DATABASE "{name}"')
    return missing


def sql(settings: Settings, statement: str, database: str = "postgres") -> str:
    """`statement`'s rows as psql prints them unaligned (`psql -tA`), run in `database`."""
    svc = settings.services
    return _run(
        statement,
        _command(
            "psql", "-h", svc.host, "-p", str(svc.postgres_port), "-U", ROLE, "-d", database,
            "-tAc", statement,
        ),
        {"PGPASSWORD": _password(settings)},
    )  # fmt: skip


def _run(what: str, command: list[str], env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})}
    )
    if result.returncode != 0:
        last = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ServiceError(f"postgres: {what} failed: {last[0]}")
    return result.stdout
