"""Issue 40's target: `prefect deployment run summit/train` with its training on a second worker
that shares no folder with the first, against the same chain on one worker, one after the other
on this machine; issue 61's: the same with the training on a second host.

    .venv/bin/python bench/two_workers.py            # the ANN1/KANG slice, cpu profile
    .venv/bin/python bench/two_workers.py --repeats 3
    .venv/bin/python bench/two_workers.py --hosts --repeats 2   # two hosts instead of two workers

Each run gets services of its own on free ports (`deepsummit up`, every file under a temporary
folder, the stage cache empty). One worker: the chain and its training flow run on `up`'s worker
(`summit-train/local`). Two workers: the training on a `gpu` pool served by a worker in mount,
PID and UTS namespaces of its own (tests/remote_worker.py), fed the snapshot through the MLflow
server. Two hosts (`--hosts`): the GPU host added as docs/deployment.md says (tests/gpu_host.py,
as tests/flows/test_two_hosts.py sets it up): the servers on the data host's address in a
network namespace of its own, Prefect with its login, MLflow with its basic-auth app taking only
the name `deepsummit-data`; the chain on the data host's worker, its training on the GPU host's,
in a network namespace of its own that reaches the servers by that name with the logins alone.
Needs root (namespaces), as those tests do. Prints, per run, the seconds from `prefect
deployment run` to its end, the snapshot's upload (data side) and download (training side), and
the median ratio of the second column to one worker.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT / "tests"))  # the tests' isolated stack and worker harness

from e2e.stack import Stack  # noqa: E402
from gpu_host import DATA_HOST_SETTINGS, gpu_host_added  # noqa: E402
from prefect.client.orchestration import get_client  # noqa: E402
from prefect.settings import temporary_settings  # noqa: E402
from remote_worker import can_isolate, create_pool, remote_worker  # noqa: E402
from session_shared import SHARED_DIR_VARIABLE  # noqa: E402
from two_hosts import NETNS_DIR, can_network  # noqa: E402

from deepsummit.core.config import deep_merge  # noqa: E402
from deepsummit.services import supervisor as services  # noqa: E402

UPLOAD = re.compile(r"published as \S+ in ([\d.]+) s")
DOWNLOAD = re.compile(r"fetched in ([\d.]+) s")
TRAIN_ON_GPU = {"train": {"deployment": "summit-train/gpu"}}
# The stages' own lines (the snapshot's upload and download) in the runs' logs, as `up`'s worker
# sends them.
STAGE_LOGS = {"PREFECT_LOGGING_EXTRA_LOGGERS": "deepsummit"}


def _seconds(stack: Stack, pattern: re.Pattern[str], flow_run_ids: list[str]) -> float | None:
    logs = stack.post(
        "/logs/filter", {"logs": {"flow_run_id": {"any_": flow_run_ids}}, "limit": 200}
    )
    found = [float(m.group(1)) for log in logs if (m := pattern.search(log["message"]))]
    return sum(found) if found else None


def _run(root: Path, name: str) -> tuple[float, float | None, float | None]:
    """The chain on one worker, on two workers or on two hosts (`name`)."""
    if name == "two hosts":
        return _run_two_hosts(root)
    two_workers = name == "two workers"
    extra = TRAIN_ON_GPU if two_workers else {}
    stack = Stack(root / "stack", extra)
    try:
        stack.up()
        if not two_workers:
            return _timed(stack)
        prefect = services.prefect_env(stack.settings)
        client_env = {k: v for k, v in prefect.items() if k.startswith("PREFECT_API")}
        client_env |= STAGE_LOGS
        with temporary_settings(client_env), get_client(sync_client=True) as client:
            create_pool(client, "gpu")
            services.deploy(stack.settings)  # as `up` does: the gpu pool's deployments too
            settings = {"mlflow": {"tracking_uri": stack.settings.mlflow.tracking_uri}}
            with remote_worker(
                "gpu", root / "training-side", client_env, settings, hidden=[stack.root]
            ) as worker:
                worker.wait_online(client)
                return _timed(stack)
    finally:
        stack.cli("down")


def _run_two_hosts(root: Path) -> tuple[float, float | None, float | None]:
    """The chain on the data host's worker, its training on the GPU host's (tests/gpu_host.py),
    the deployments applied as `up` applies them; the namespaces checked gone afterwards."""
    stack = Stack(root / "data-host", deep_merge(DATA_HOST_SETTINGS, TRAIN_ON_GPU))
    with gpu_host_added(stack.overrides, root / "training-host", STAGE_LOGS) as added:
        namespaces = [added.hosts.data.namespace, added.hosts.training.namespace]
        stack.use_servers()
        services.deploy(stack.settings)
        timed = _timed(stack)
    left = [name for name in namespaces if (NETNS_DIR / name).exists()]
    assert not left, f"network namespaces left behind: {left}"
    return timed


def _timed(stack: Stack) -> tuple[float, float | None, float | None]:
    started = time.monotonic()
    chain = stack.trigger()
    seconds = time.monotonic() - started
    assert stack.wait_finished(chain)["state_type"] == "COMPLETED"
    runs = [chain, stack.training_run(chain)["id"]]
    return seconds, _seconds(stack, UPLOAD, runs), _seconds(stack, DOWNLOAD, runs)


def _measure(repeats: int, second: str) -> dict[str, list[float]]:
    """The chain's seconds on one worker and on `second`, taking turns, each run printed."""
    timings: dict[str, list[float]] = {"one worker": [], second: []}
    print(f"{'run':<14}{'chain s':>9}{'upload s':>10}{'download s':>12}")
    for repeat in range(repeats):
        for name in timings:
            with tempfile.TemporaryDirectory(prefix="deepsummit-two-workers-") as folder:
                seconds, up, down = _run(Path(folder), name)
            timings[name].append(seconds)
            show = [f"{v:.1f}" if v is not None else "-" for v in (up, down)]
            print(f"{name:<14}{seconds:>9.1f}{show[0]:>10}{show[1]:>12}  (repeat {repeat + 1})")
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument(
        "--hosts", action="store_true", help="the training on a second host, not a second worker"
    )
    args = parser.parse_args()
    second = "two hosts" if args.hosts else "two workers"
    if args.hosts and (why := can_isolate() or can_network()):
        parser.error(f"--hosts: {why}")
    with tempfile.TemporaryDirectory(prefix="deepsummit-two-workers-shared-") as shared:
        # The migrated Prefect database the stacks start on is made once in this folder
        # (tests/session_shared.py), as in a test session.
        os.environ.setdefault(SHARED_DIR_VARIABLE, shared)
        timings = _measure(args.repeats, second)
    one, two = (statistics.median(timings[k]) for k in timings)
    print(f"median: one worker {one:.1f} s, {second} {two:.1f} s, ratio {two / one:.2f}")


if __name__ == "__main__":
    main()
