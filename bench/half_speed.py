"""A command on this machine made about twice as slow: a busy loop pinned to each core takes
half of it, so every process of the command runs at about half speed (the kernel shares a core
evenly between its runnable processes), while its sleeps and timeouts keep their length. It is
how this machine stands in for the slower machines of its kind (about 2× slower) that
`make train` and `make test` have budgets on. Prints the command's wall time and exit code.

    .venv/bin/python bench/half_speed.py -- bash .ci/run          # in a fresh clone
    .venv/bin/python bench/half_speed.py -- make train

Where more of the command's processes run at once than there are cores, each gets a little
more than it would on a machine twice as slow (two test processes and a loop share a core in
thirds, not quarters), so the figure leans low there.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import time


def _busy(core: int) -> None:
    os.sched_setaffinity(0, {core})
    while True:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    command = parser.parse_args().command
    command = (command[1:] if command[:1] == ["--"] else command) or ["make", "test"]
    loops = [
        multiprocessing.Process(target=_busy, args=(core,), daemon=True)
        for core in sorted(os.sched_getaffinity(0))
    ]
    for loop in loops:
        loop.start()
    started = time.monotonic()
    try:
        code = subprocess.run(command).returncode
    finally:
        for loop in loops:
            loop.kill()
    wall = time.monotonic() - started
    print(
        f"{' '.join(command)}: {wall:.1f} s ({int(wall // 60)} min {wall % 60:.0f} s) beside "
        f"{len(loops)} busy loops (one per core), exit code {code}"
    )
    sys.exit(code)


if __name__ == "__main__":
    main()
