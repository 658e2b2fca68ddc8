"""The package as a user installs it: the wheel built from this checkout carries its SQL and its
settings file, installs into a fresh virtual environment, and `deepsummit ingest` from there
loads the bundle in a folder outside the repository.

The new environment gets its third-party packages from the project's (a path in a .pth file, so
nothing is downloaded); deepsummit itself comes only from the wheel.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from services_fixtures import free_port

from deepsummit.core.config import load_settings
from deepsummit.core.sections import PROJECT_ROOT

BUNDLE = load_settings().paths.data_dir


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    source = tmp_path_factory.mktemp("source")  # setuptools builds in the tree it is given
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(PROJECT_ROOT / name, source / name)
    ignored = shutil.ignore_patterns("*.egg-info", "__pycache__")
    shutil.copytree(PROJECT_ROOT / "src", source / "src", ignore=ignored)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(dist), str(source)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (built,) = dist.glob("deepsummit-*.whl")
    return built


def test_the_wheel_carries_the_sql_and_the_settings_and_no_tests(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    sql_files = {Path(name).name for name in names if name.startswith("deepsummit/sql/")}
    assert sql_files == {path.name for path in (PROJECT_ROOT / "src/deepsummit/sql").glob("*.sql")}
    assert "deepsummit/deepsummit.toml" in names
    assert not [name for name in names if name.startswith(("tests/", "bench/"))]


def test_the_installed_wheel_ingests_the_bundle_outside_the_repository(
    wheel: Path, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    (purelib / "project-dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin/python"), "install", "-q",
         "--no-deps", "--no-index", str(wheel)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DEEPSUMMIT_", "PREFECT_"))}
    env |= {"DEEPSUMMIT_SERVICES__PREFECT_PORT": str(free_port())}  # no server: a temporary one
    # ...which may take longer than Prefect's default 20 s to start on a busy machine
    startup = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
    env[startup] = os.environ[startup]
    imported = subprocess.run(
        [str(venv / "bin/python"), "-c", "import deepsummit; print(deepsummit.__file__)"],
        cwd=elsewhere, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert imported.stdout.startswith(str(venv)), imported.stdout

    result = subprocess.run(
        [str(venv / "bin/deepsummit"), "ingest", "--data-dir", str(BUNDLE)],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "members" in result.stdout and "76,519" in result.stdout, result.stdout
    assert (elsewhere / "var" / "warehouse.duckdb").exists()  # relative to where it runs
