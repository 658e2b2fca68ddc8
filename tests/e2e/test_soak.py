"""The short soak: nightly `summit/train` runs of the tiny profile on a two-peak slice against
services of their own, each night with one SIGKILL at a random moment of its run, every kind of
process killed once (the worker, the MLflow server and the Prefect server in a drawn order, then
the stage process).
After each night, before the next, the digests of every warehouse table, the features snapshot
and the registry are each the night before's or a complete new one, never a mix; a night that
ends Crashed leaves them as they were, but for the version its training registered where that
completed (tests/soak_digests.py). Each night's row, its
kill and its digests' verdicts, is printed as it ends (`pytest -s`) and goes into the failure
message. bench/soak.py is the long one (`make soak`).

The moments are drawn anew each session; SOAK_SEED=<the seed the report names> draws them
again."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from flows_fixtures import write_bundle_slice
from soak_digests import clean_load
from soak_nights import (
    HEADER,
    NO_KILL,
    PROFILE,
    STAGE_PROCESS,
    TARGETS,
    Soak,
    night_row,
    soak_settings,
    soak_stack,
)

pytestmark = [pytest.mark.e2e, pytest.mark.long, pytest.mark.timeout(1800)]

NIGHTS = 4  # one for each kind of kill
# Nights beyond those for a kill whose moment found the run already finished: it is drawn again
# on the next night, in a range halved for each miss.
SPARE_NIGHTS = 2
KILL_WITHIN = (0.1, 0.6)  # the part of a clean run's time after which the kill lands
OUTAGE_S = 5.0
NIGHT_TIMEOUT_S = 420.0
SETTINGS = {
    # A killed flow run's process holds the warehouse's slot until its lease runs out: the least
    # the server takes (60 s) rather than the product's 300, should a night follow that kill.
    "services": {"slot_lease_s": 60},
    # A worker killed after it took the training's flow run but before it started its process
    # leaves that run Pending: the chain cancels it and fails after this long (the product's
    # 900 s), well beyond the seconds a busy machine takes to start one.
    "train": {"pickup_deadline_s": 120},
}


def test_every_kind_of_process_killed_and_every_night_whole(tmp_path: Path) -> None:
    seed = int(os.environ.get("SOAK_SEED", random.randrange(10**6)))
    rng = random.Random(seed)
    bundle = write_bundle_slice(tmp_path / "data")
    clean = clean_load(tmp_path / "clean", bundle, PROFILE)
    settings, overrides = soak_settings(tmp_path / "soak", bundle, SETTINGS)
    print(f"\nseed {seed}\n{HEADER}", flush=True)
    with soak_stack(settings, overrides) as stack:
        soak = Soak(stack, clean, OUTAGE_S, NIGHT_TIMEOUT_S)
        clean_run_s = soak.night(NO_KILL, 0.0).seconds
        # The stage process last, the others in a drawn order: the night after its kill would
        # only wait out the slot's lease, whose end tests/flows/test_lease_outage.py shows
        # giving the next run the slot.
        others = [target for target in TARGETS if target != STAGE_PROCESS]
        schedule = [*rng.sample(others, len(others)), STAGE_PROCESS]
        misses = dict.fromkeys(TARGETS, 0)
        while schedule and len(soak.nights) <= NIGHTS + SPARE_NIGHTS:
            target = schedule.pop(0)
            share = rng.uniform(*KILL_WITHIN) * 0.5 ** misses[target]
            if not soak.night(target, share * clean_run_s).hit:
                misses[target] += 1
                schedule.insert(0, target)
    report = f"seed {seed}\n{HEADER}\n" + "\n".join(night_row(night) for night in soak.nights)
    hit = {night.target for night in soak.nights if night.hit}
    assert hit == set(TARGETS), f"not killed while a run ran: {set(TARGETS) - hit}\n{report}"
    assert len(soak.nights) > NIGHTS, report
    assert soak.nights[0].state == "COMPLETED", report
    assert not [failure for night in soak.nights for failure in night.failures], report
