"""A command on this machine made about twice as slow: each core does half the command's work
per second, while its sleeps and timeouts keep their length. It is how this machine stands in
for the slower machines of its kind (about 2× slower) that `make train` and `make test` have
budgets on. Prints the command's wall time, the model of slowness it ran under, and its exit
code.

    .venv/bin/python bench/half_speed.py -- bash .ci/run          # in a fresh clone
    .venv/bin/python bench/half_speed.py -- make train

Two parts make the slowness:
- A busy loop pinned to each core: one process of the command alone on a core gets half of it
  (the kernel shares a core evenly between its runnable processes).
- A CPU quota of half the machine on a cgroup of the command's own (cgroup v2 `cpu.max`, or v1
  `cpu.cfs_quota_us`). Without it, where more of the command's processes run at once than
  there are cores, each would get more than half a core's share (two test processes and a loop
  share a core in thirds, not quarters), and the figure would lean low. With it, the command's
  processes together never get more than half the machine's CPU time.

Measured with a pure-Python loop in a pool of k processes (wall time against the same alone):
the loops alone made it 1.95 times as slow for k = 1 but 1.45 times for k = 4; the loops and
the quota 1.5 to 1.6 times for k = 1 (the kernel's group scheduling gives a lone process of the
cgroup more than the loop's half) and 2.0 times for k = 2 and 4. So with the quota a command
that keeps both cores busy (the test suite) is made twice as slow, and one that runs one
process at a time (pip's install) leans low. Where no cpu cgroup is writable, the loops alone
run and the line printed at the end says so.
Processes the command leaves running (the services of `make train`) are moved out of the
cgroup at the end, so they run at full speed afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

CGROUP_V2 = Path("/sys/fs/cgroup")
CGROUP_V1_CPU = Path("/sys/fs/cgroup/cpu")
PERIOD_US = 100_000


def _busy(core: int) -> None:
    os.sched_setaffinity(0, {core})
    while True:
        pass


def _half_machine_cgroup(cores: int) -> Path | None:
    """A new cgroup whose processes share at most half of `cores` cores' time; None where no
    cpu cgroup can be made."""
    name = f"half-speed-{os.getpid()}"
    quota_us = cores * PERIOD_US // 2
    with contextlib.suppress(OSError):  # no cgroup v2, or its cpu controller not given to ours
        if "cpu" in (CGROUP_V2 / "cgroup.subtree_control").read_text().split():
            return _made(CGROUP_V2 / name, {"cpu.max": f"{quota_us} {PERIOD_US}"})
    return _made(
        CGROUP_V1_CPU / name,
        {"cpu.cfs_period_us": str(PERIOD_US), "cpu.cfs_quota_us": str(quota_us)},
    )


def _made(group: Path, limits: dict[str, str]) -> Path | None:
    """`group` made with `limits` written to its files; None (and nothing left behind) where
    it cannot be."""
    try:
        group.mkdir()
    except OSError:
        return None
    try:
        for file, value in limits.items():
            (group / file).write_text(value)
    except OSError:
        group.rmdir()
        return None
    return group


def _release(group: Path) -> None:
    """Move what the command left running back to the parent cgroup, then remove `group`."""
    for pid in (group / "cgroup.procs").read_text().split():
        with contextlib.suppress(OSError):  # it may have exited meanwhile
            (group.parent / "cgroup.procs").write_text(pid)
    group.rmdir()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    command = parser.parse_args().command
    command = (command[1:] if command[:1] == ["--"] else command) or ["make", "test"]
    cores = sorted(os.sched_getaffinity(0))
    group = _half_machine_cgroup(len(cores))
    loops = [multiprocessing.Process(target=_busy, args=(c,), daemon=True) for c in cores]
    for loop in loops:
        loop.start()

    def join_group() -> None:  # in the child, before it runs the command
        if group is not None:
            (group / "cgroup.procs").write_text(str(os.getpid()))

    started = time.monotonic()
    try:
        code = subprocess.run(command, preexec_fn=join_group).returncode
    finally:
        for loop in loops:
            loop.kill()
        if group is not None:
            _release(group)
    wall = time.monotonic() - started
    model = (
        f"{len(loops)} busy loops (one per core) and a quota of {len(cores) / 2:g} cores"
        if group is not None
        else f"{len(loops)} busy loops (one per core) alone, no cpu cgroup: leans low"
    )
    print(
        f"{' '.join(command)}: {wall:.1f} s ({int(wall // 60)} min {wall % 60:.0f} s) "
        f"beside {model}, exit code {code}"
    )
    sys.exit(code)


if __name__ == "__main__":
    main()
