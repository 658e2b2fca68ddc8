"""Issue 41's soak: nightly `summit/train` runs of the tiny profile in a row against local services
of its own, each with one SIGKILL at a random moment (the flow run's process, the worker, the
MLflow server or the Prefect server), the killed service brought back as `deepsummit up` brings
it back; then one clean run and the checks: the warehouse holds what a clean load of the same
bundle in a fresh folder holds, no row duplicated or lost, the champion answers a prediction, and
the champion carries the digest of its files.

    .venv/bin/python bench/soak.py                       # 10 nights, the whole bundle
    .venv/bin/python bench/soak.py --nights 2 --peaks ANN1 KANG   # a quick try on a slice

Every file (var/, warehouse, mlruns, Prefect home, logs) lies under --workdir (default: a new
temporary folder, removed afterwards unless --keep), the servers listen on free ports below the
ephemeral range, so a `deepsummit up` on the default ports runs beside it untouched. Each night
starts with the stage cache dropped, as a night with new data recomputes every stage, so a kill
lands in real work (--keep-cache: reruns served from the cache). The kills are drawn from a
seeded RNG (--seed), so a soak is repeatable up to the machine's timing. Prints one row per night
(what was killed, when, the run's final state), the checks and the total time; exits 1 if a check
fails. Not part of `make test`: a night takes minutes.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT / "tests"))  # the tests' isolated stack: flows_fixtures & co.

import duckdb  # noqa: E402
from flows_fixtures import as_environment, isolated_paths, write_bundle_slice  # noqa: E402
from mlflow import MlflowClient  # noqa: E402
from mlflow.exceptions import MlflowException  # noqa: E402
from services_fixtures import STARTUP_TIMEOUT_S, free_port  # noqa: E402

from deepsummit.contracts.champion import TAG_FILES_DIGEST  # noqa: E402
from deepsummit.core.config import Settings, deep_merge, load_settings  # noqa: E402
from deepsummit.core.context import RunContext  # noqa: E402
from deepsummit.core.errors import ServiceUnavailable  # noqa: E402
from deepsummit.features.stage import build_features  # noqa: E402
from deepsummit.flows.runner import result_storage  # noqa: E402
from deepsummit.records.stage import ingest_records  # noqa: E402
from deepsummit.services import supervisor as services  # noqa: E402
from deepsummit.services.prefect_api import PrefectApi  # noqa: E402
from deepsummit.weather import load_weather  # noqa: E402

PROFILE = "tiny"
FINAL_STATES = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")
STAGE_PROCESS = "stage process"
NO_KILL = "nothing (a clean run)"
TARGETS = (STAGE_PROCESS, services.WORKER, services.MLFLOW_SERVER, services.PREFECT_SERVER)
# Raw table → the clean table its rows end in (or in the quarantine, under that table's name).
RAW_TO_CLEAN = {
    "raw_members": "members",
    "raw_expeditions": "expeditions",
    "raw_expeditions_tidytuesday": "expedition_details",
    "raw_peaks": "peaks",
}
# The key of each table that a row may hold once; the clean tables' are their primary keys.
KEYS = {
    **{raw: ("_source", "_row") for raw in RAW_TO_CLEAN},
    "quarantine": ("source", "table_name", "row_number", "reason"),
    "peaks": ("peakid",),
    "expeditions": ("expid", "year"),
    "expedition_details": ("expid", "year"),
    "members": ("member_id", "year"),
    "weather_daily": ("peakid", "date", "source"),
    "features": ("member_id", "year"),
}
# A planned attempt on a peak of every bundle (and of the slice the docstring names).
PREDICTION = ("predict", "--peak", "KANG", "--push-date", "2015-05-10", "--age", "35")
# Connection errors of a server that is down or restarting: wait and ask again.
UNREACHABLE = (OSError, urllib.error.URLError, ServiceUnavailable, TimeoutError)


@dataclass
class Night:
    number: int
    target: str
    delay_s: float
    killed: str = ""  # what was killed (pid), or why nothing was
    restored: str = ""  # what `up` did afterwards
    state: str = ""  # the run's final state
    seconds: float = 0.0


@dataclass
class Check:
    name: str
    passed: bool
    detail: str


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", type=int, default=10)
    parser.add_argument("--seed", type=int, default=41)
    parser.add_argument("--workdir", type=Path, help="where every file goes (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep --workdir's files afterwards")
    parser.add_argument("--bundle", type=Path, help="the data bundle (default: paths.data_dir)")
    parser.add_argument("--peaks", nargs="+", help="only these peaks of the bundle (a slice)")
    parser.add_argument(
        "--kill-within",
        type=float,
        nargs=2,
        default=(0.05, 0.75),
        metavar=("FIRST", "LAST"),
        help="the kill lands this part of a clean run's time after the run starts (uniform)",
    )
    parser.add_argument(
        "--outage", type=float, default=15.0, help="seconds the killed service stays down"
    )
    parser.add_argument(
        "--night-timeout", type=float, default=900.0, help="seconds a run may take to finish"
    )
    parser.add_argument("--keep-cache", action="store_true", help="do not drop the stage cache")
    args = parser.parse_args()
    started = time.monotonic()
    workdir = (args.workdir or Path(tempfile.mkdtemp(prefix="deepsummit-soak-"))).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    bundle = _bundle(args.bundle, args.peaks, workdir / "data")
    settings, overrides = _isolated_settings(workdir / "soak", bundle)
    _use_only(overrides)
    print(f"workdir {workdir}, bundle {bundle}, seed {args.seed}", flush=True)
    try:
        nights, checks = _soak(settings, args, started)
    finally:
        services.down(settings)
    checks += _warehouse_checks(settings, workdir / "reference", bundle)
    _report(nights, checks, time.monotonic() - started)
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    sys.exit(0 if all(check.passed for check in checks) else 1)


def _soak(
    settings: Settings, args: argparse.Namespace, started: float
) -> tuple[list[Night], list[Check]]:
    """`up`, a clean run, the nights, a clean run; the runs and the checks of the services."""
    rng = random.Random(args.seed)
    nights: list[Night] = []
    checks: list[Check] = []
    services.up(settings, STARTUP_TIMEOUT_S)
    os.environ.update(services.prefect_env(settings))  # the secret `up` generated
    api = services.prefect_api(settings)
    deployment = api.get("/deployments/name/summit/train")["id"]
    print(f"services up: {time.monotonic() - started:.0f} s", flush=True)
    # A clean first run: the champion the nights start from, and how long a run works,
    # so that every kill lands inside a run whatever the bundle's size.
    warmup = _clean_run(settings, api, deployment, args)
    nights.append(warmup)
    print(_row(warmup), flush=True)
    for number in range(1, args.nights + 1):
        _drop_cache(settings, args.keep_cache)
        share = rng.uniform(*args.kill_within)
        night = Night(number, rng.choice(TARGETS), share * warmup.seconds)
        _night(settings, api, deployment, night, args.outage, args.night_timeout)
        nights.append(night)
        print(_row(night), flush=True)
    final = _clean_run(settings, api, deployment, args)
    final.number = args.nights + 1
    nights.append(final)
    print(_row(final), flush=True)
    for run, when in ((warmup, "before"), (final, "after")):
        checks.append(Check(f"clean run {when} the nights", run.state == "COMPLETED", run.state))
    stuck = [str(night.number) for night in nights if night.state not in FINAL_STATES]
    checks.append(Check("every run reached a final state", not stuck, f"stuck: {stuck or '-'}"))
    checks += _champion_checks(settings)
    return nights, checks


# ---------------------------------------------------------------- the stack


def _bundle(bundle: Path | None, peaks: list[str] | None, slice_dir: Path) -> Path:
    """The bundle the runs load: --bundle (or the configured one), sliced to --peaks if given."""
    source = (bundle or load_settings().paths.data_dir).resolve()
    if not peaks:
        return source
    os.environ["DEEPSUMMIT_PATHS__DATA_DIR"] = str(source)  # what the slice reads
    return write_bundle_slice(slice_dir, tuple(peaks))


def _isolated_settings(root: Path, bundle: Path) -> tuple[Settings, dict[str, Any]]:
    """The tiny profile with every path under `root`, free ports and `bundle`; and the
    overrides that made it (for the environment of everything `up` starts)."""
    overrides = isolated_paths(root)
    overrides["paths"]["data_dir"] = str(bundle)
    overrides["services"].update(prefect_port=free_port(), mlflow_port=free_port())
    mlflow_port = overrides["services"]["mlflow_port"]
    overrides["mlflow"] = {"tracking_uri": f"http://127.0.0.1:{mlflow_port}"}
    return load_settings(PROFILE, overrides), overrides


def _use_only(overrides: dict[str, Any]) -> None:
    """This process's environment names the soak's settings only, so the services, the flow
    runs (whose environment is the worker's) and the CLI all use them; a nightly run has no
    parameters, so the profile comes from DEEPSUMMIT_PROFILE."""
    for name in [n for n in os.environ if n.startswith(("PREFECT_", "DEEPSUMMIT_"))]:
        del os.environ[name]
    os.environ.update(as_environment(overrides))
    os.environ["DEEPSUMMIT_PROFILE"] = PROFILE


# ---------------------------------------------------------------- a night


def _clean_run(
    settings: Settings, api: PrefectApi, deployment: str, args: argparse.Namespace
) -> Night:
    """A night without a kill."""
    _drop_cache(settings, args.keep_cache)
    night = Night(0, NO_KILL, 0.0)
    _night(settings, api, deployment, night, args.outage, args.night_timeout)
    return night


def _drop_cache(settings: Settings, keep: bool) -> None:
    """As a night with new data: every stage computes again."""
    if not keep:
        shutil.rmtree(result_storage(settings.paths), ignore_errors=True)


def _night(
    settings: Settings,
    api: PrefectApi,
    deployment: str,
    night: Night,
    outage_s: float,
    timeout_s: float,
) -> None:
    """One nightly run: the kill `night` drew (none for a clean run), `up` after the outage,
    the run's final state and the seconds from its start to its end."""
    flow_run = _trigger(api, deployment)
    running = _wait_for(
        lambda: _state(api, flow_run) not in ("SCHEDULED", "PENDING", None), timeout_s
    )
    started = time.monotonic()
    if not running:
        night.killed = "nothing: the run never started"
    elif night.target == NO_KILL:
        night.killed = NO_KILL
    else:
        finished = _wait_for(lambda: _state(api, flow_run) in FINAL_STATES, night.delay_s)
        # A service killed after the run finished is still a fault the next night meets.
        night.killed = _kill(settings, night.target, flow_run)
        night.killed += " after the run finished" if finished else ""
        time.sleep(outage_s)
        night.restored = _restore(settings)
    state = _wait_final(api, flow_run, timeout_s)
    night.seconds = time.monotonic() - started
    if state not in FINAL_STATES:
        # A run left Running forever holds the deployment's one slot: every later night would
        # queue behind it. Cancel it so that the soak goes on, and say so.
        api.post(
            f"/flow_runs/{flow_run}/set_state",
            {"state": {"type": "CANCELLED", "name": "Cancelled"}, "force": True},
        )
        state = f"{state} after {timeout_s:.0f} s (cancelled)"
    night.state = state


def _trigger(api: PrefectApi, deployment: str) -> str:
    """A run of `summit/train` as the nightly schedule creates it: no parameters."""
    return api.post(f"/deployments/{deployment}/create_flow_run", {})["id"]


def _state(api: PrefectApi, flow_run: str) -> str | None:
    """The run's state type; None while the server does not answer."""
    try:
        return api.get(f"/flow_runs/{flow_run}", timeout_s=10)["state_type"]
    except UNREACHABLE:
        return None


def _wait_for(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(1)
    return True


def _wait_final(api: PrefectApi, flow_run: str, timeout_s: float) -> str:
    """The run's final state type, or the state it was still in after `timeout_s`."""
    _wait_for(lambda: _state(api, flow_run) in FINAL_STATES, timeout_s)
    return _state(api, flow_run) or "unknown (Prefect server not answering)"


def _kill(settings: Settings, target: str, flow_run: str) -> str:
    """SIGKILL the main process of `target`; what was killed."""
    if target == STAGE_PROCESS:
        pid = _flow_run_process(flow_run)
        if pid is None:
            return f"{target}: none found"
    else:
        pid = services.recorded_pid(settings, target)
        if pid is None:
            return f"{target}: was not running"
    os.kill(pid, signal.SIGKILL)
    return f"{target} (pid {pid})"


def _flow_run_process(flow_run: str) -> int | None:
    """The process the worker started for `flow_run` (its environment names the run; its
    parent's does not)."""
    marker = f"PREFECT__FLOW_RUN_ID={flow_run}".encode()
    marked = set()
    parents = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if marker in (proc / "environ").read_bytes().split(b"\0"):
                pid = int(proc.name)
                marked.add(pid)
                parents[pid] = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
    top = [pid for pid in marked if parents[pid] not in marked]
    return min(top) if top else None


def _restore(settings: Settings) -> str:
    """`deepsummit up`: start what is not running; what it did to the services."""
    try:
        lines = services.up(settings, STARTUP_TIMEOUT_S)
    except ServiceUnavailable as error:
        return f"up failed: {error}"
    done = [
        line
        for line in lines
        if line.startswith(services.SERVICE_NAMES) and not line.endswith("already running")
    ]
    return "; ".join(done) or "nothing to restart"


# ---------------------------------------------------------------- the checks


def _champion_checks(settings: Settings) -> list[Check]:
    """The champion answers `deepsummit predict`; it and every version promoted carry their
    files' digest."""
    client = MlflowClient(tracking_uri=settings.mlflow.tracking_uri)
    name = settings.mlflow.registered_model
    try:
        champion = client.get_model_version_by_alias(name, "champion")
    except MlflowException as error:  # no model, or no champion alias
        return [Check("a champion", False, f"{type(error).__name__}: {error}")]
    versions = client.search_model_versions(f"name='{name}'")
    no_digest = sorted(int(v.version) for v in versions if not v.tags.get(TAG_FILES_DIGEST))
    champion_digest = bool(champion.tags.get(TAG_FILES_DIGEST))
    result = subprocess.run(
        [sys.executable, "-m", "deepsummit.cli.app", *PREDICTION],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    answer = [line for line in result.stdout.splitlines() if "P(summit)" in line]
    return [
        Check(
            "champion has its files digest",
            champion_digest,
            f"version {champion.version} of {len(versions)}; versions without: {no_digest or '-'}",
        ),
        Check(
            "champion loads and answers",
            result.returncode == 0 and bool(answer),
            answer[0].strip() if answer else (result.stderr.strip().splitlines() or ["-"])[-1],
        ),
    ]


def _warehouse_checks(settings: Settings, reference_root: Path, bundle: Path) -> list[Check]:
    """Counts against a clean load of the same bundle in a fresh folder, keys unique, and
    every raw row either clean or quarantined."""
    reference = _reference_warehouse(reference_root, bundle)
    soaked = _table_counts(settings.paths.warehouse)
    clean = _table_counts(reference)
    checks = [
        Check(
            f"rows of {table} as a clean load",
            soaked.get(table) == rows,
            f"{soaked.get(table, 'absent')} (clean load: {rows})",
        )
        for table, rows in sorted(clean.items())
    ]
    with duckdb.connect(str(settings.paths.warehouse), read_only=True) as con:
        for table, key in KEYS.items():
            if table not in soaked:
                continue
            columns = ", ".join(key)
            (duplicated,) = con.execute(
                f"SELECT count(*) FROM (SELECT {columns} FROM {table} "
                f"GROUP BY ALL HAVING count(*) > 1)"
            ).fetchone()
            checks.append(Check(f"{table} key unique", duplicated == 0, f"{duplicated} duplicated"))
        for raw, table in RAW_TO_CLEAN.items():
            (quarantined,) = con.execute(
                "SELECT count(DISTINCT row_number) FROM quarantine WHERE table_name = ?", [table]
            ).fetchone()
            rows, kept = soaked.get(raw, 0), soaked.get(table, 0)
            checks.append(
                Check(
                    f"{raw} = {table} + quarantined",
                    rows == kept + quarantined,
                    f"{rows} = {kept} + {quarantined}",
                )
            )
    return checks


def _reference_warehouse(root: Path, bundle: Path) -> Path:
    """The warehouse a clean load of `bundle` leaves in a new folder: the stages that write it
    (records, weather, features), called as plain functions."""
    overrides = deep_merge(isolated_paths(root), {"paths": {"data_dir": str(bundle)}})
    settings = load_settings(PROFILE, overrides)
    context = RunContext(settings.paths.runs_dir / "reference")
    ingest_records(settings, context)
    load_weather(settings, context)
    build_features(settings, context)
    return settings.paths.warehouse


def _table_counts(warehouse: Path) -> dict[str, int]:
    with duckdb.connect(str(warehouse), read_only=True) as con:
        tables = [name for (name,) in con.execute("SHOW TABLES").fetchall()]
        return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}


# ---------------------------------------------------------------- the report


def _row(night: Night) -> str:
    restored = f"; up: {night.restored}" if night.restored else ""
    kill_at = "-" if night.target == NO_KILL else f"{night.delay_s:.0f} s"
    return (
        f"{night.number:>5}  {kill_at:>8}  {night.killed + restored:<70}  "
        f"{night.state:<12} {night.seconds:>6.0f} s"
    )


def _report(nights: list[Night], checks: list[Check], total_s: float) -> None:
    print(f"\n{'night':>5}  {'kill at':>8}  {'killed':<70}  {'final state':<12} {'time':>8}")
    for night in nights:
        print(_row(night))
    print()
    for check in checks:
        print(f"{'ok  ' if check.passed else 'FAIL'}  {check.name}: {check.detail}")
    print(f"\ntotal {total_s / 60:.1f} min, {sum(not c.passed for c in checks)} checks failed")


if __name__ == "__main__":
    main()
