"""The long soak (`make soak`): nightly `summit/train` runs of the tiny profile in a row against
local services of their own, each with one SIGKILL at a random moment (the flow run's process,
the worker, the MLflow server or the Prefect server), the killed service brought back as
`deepsummit up` brings it back (tests/soak_nights.py, which the short soak of `make test`,
tests/e2e/test_soak.py, runs too). After each night the digests of every warehouse table, the
features snapshot and the registry are each the night before's or a complete new one, never a
mix, and a night that ends Crashed leaves them as they were (tests/soak_digests.py). A clean
run before the nights and one after; then the champion answers a prediction.

    .venv/bin/python bench/soak.py                       # 10 nights, the whole bundle
    .venv/bin/python bench/soak.py --nights 2 --peaks ANN1 KANG   # a quick try on a slice

Every file (var/, warehouse, mlruns, Prefect home, logs) lies under --workdir (default: a new
temporary folder, removed afterwards unless --keep), the servers listen on free ports below the
ephemeral range, so a `deepsummit up` on the default ports runs beside it untouched. Each night
starts with the stage cache dropped, as a night with new data recomputes every stage, so a kill
lands in real work (--keep-cache: reruns served from the cache). The kills are drawn from a
seeded RNG (--seed), so a soak is repeatable up to the machine's timing; a kill whose moment
finds the run finished is not sent, and the night says so. Prints one row per night as it ends
(what was killed and when, the run's final state, what each digest showed), the checks and the
total time; exits 1 if a check fails. Not part of `make test`: a night takes minutes.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT / "tests"))  # the tests' isolated stack: soak_nights & co.

from flows_fixtures import write_bundle_slice  # noqa: E402
from session_shared import SHARED_DIR_VARIABLE  # noqa: E402
from soak_digests import clean_load  # noqa: E402
from soak_nights import (  # noqa: E402
    FINAL_STATES,
    HEADER,
    NO_KILL,
    PROFILE,
    TARGETS,
    Night,
    Soak,
    night_row,
    soak_settings,
    soak_stack,
)

from deepsummit.core.config import load_settings  # noqa: E402

# A planned attempt on a peak of every bundle (and of the slice the docstring names).
PREDICTION = ("predict", "--peak", "KANG", "--push-date", "2015-05-10", "--age", "35")


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
        "--night-timeout", type=float, default=1200.0, help="seconds a run may take to finish"
    )
    parser.add_argument("--keep-cache", action="store_true", help="do not drop the stage cache")
    args = parser.parse_args()
    started = time.monotonic()
    workdir = (args.workdir or Path(tempfile.mkdtemp(prefix="deepsummit-soak-"))).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    # The migrated Prefect database the tests' stacks start on is made once in this folder
    # (tests/session_shared.py), as in a test session.
    os.environ.setdefault(SHARED_DIR_VARIABLE, str(workdir / "shared"))
    Path(os.environ[SHARED_DIR_VARIABLE]).mkdir(parents=True, exist_ok=True)
    bundle = _bundle(args.bundle, args.peaks, workdir / "data")
    print(f"workdir {workdir}, bundle {bundle}, seed {args.seed}", flush=True)
    clean = clean_load(workdir / "clean", bundle, PROFILE)
    settings, overrides = soak_settings(workdir / "soak", bundle)
    print(f"clean load: {time.monotonic() - started:.0f} s\n{HEADER}", flush=True)
    with soak_stack(settings, overrides) as stack:
        soak = Soak(stack, clean, args.outage, args.night_timeout, drop_cache=not args.keep_cache)
        _nights(soak, args)
        checks = _checks(soak.nights)
    _report(soak.nights, checks, time.monotonic() - started)
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    sys.exit(0 if all(check.passed for check in checks) else 1)


def _bundle(bundle: Path | None, peaks: list[str] | None, slice_dir: Path) -> Path:
    """The bundle the runs load: --bundle (or the configured one), sliced to --peaks if given."""
    source = (bundle or load_settings().paths.data_dir).resolve()
    if not peaks:
        return source
    os.environ["DEEPSUMMIT_PATHS__DATA_DIR"] = str(source)  # what the slice reads
    return write_bundle_slice(slice_dir, tuple(peaks))


def _nights(soak: Soak, args: argparse.Namespace) -> None:
    """A clean first run (the champion the nights start from, and how long a run works, so
    that every kill lands inside a run whatever the bundle's size), the nights, a clean run."""
    rng = random.Random(args.seed)
    warmup = soak.night(NO_KILL, 0.0)
    for _ in range(args.nights):
        soak.night(rng.choice(TARGETS), rng.uniform(*args.kill_within) * warmup.seconds)
    soak.night(NO_KILL, 0.0)


def _checks(nights: list[Night]) -> list[Check]:
    """The clean runs completed, every run ended, no night's digests showed what they should
    not have, and the champion answers `deepsummit predict`."""
    checks = [
        Check(f"clean run {when} the nights", run.state == "COMPLETED", run.state)
        for run, when in ((nights[0], "before"), (nights[-1], "after"))
    ]
    stuck = [str(night.number) for night in nights if night.state not in FINAL_STATES]
    checks.append(Check("every run reached a final state", not stuck, f"stuck: {stuck or '-'}"))
    kills = [night for night in nights if night.target != NO_KILL]
    hit = sorted({night.target for night in kills if night.hit})
    hits = f"{sum(night.hit for night in kills)} of {len(kills)}; kinds: {', '.join(hit) or '-'}"
    checks.append(Check("kills that hit a running run", True, hits))
    for night in nights:
        failed = "; ".join(night.failures)
        checks.append(Check(f"night {night.number}'s digests", not failed, failed or "whole"))
    return [*checks, _champion_answers()]


def _champion_answers() -> Check:
    """`deepsummit predict` (the soak's settings are this process's environment)."""
    result = subprocess.run(
        [sys.executable, "-m", "deepsummit.cli.app", *PREDICTION],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    answer = [line for line in result.stdout.splitlines() if "P(summit)" in line]
    detail = answer[0].strip() if answer else (result.stderr.strip().splitlines() or ["-"])[-1]
    return Check("champion loads and answers", result.returncode == 0 and bool(answer), detail)


def _report(nights: list[Night], checks: list[Check], total_s: float) -> None:
    print(f"\n{HEADER}")
    for night in nights:
        print(night_row(night))
    print()
    for check in checks:
        print(f"{'ok  ' if check.passed else 'FAIL'}  {check.name}: {check.detail}")
    print(f"\ntotal {total_s / 60:.1f} min, {sum(not c.passed for c in checks)} checks failed")


if __name__ == "__main__":
    main()
