"""Issue 40's target: `prefect deployment run summit/train` with its training on a second worker
that shares no folder with the first, against the same chain on one worker, one after the other
on this machine.

    .venv/bin/python bench/two_workers.py            # the ANN1/KANG slice, cpu profile
    .venv/bin/python bench/two_workers.py --repeats 3

Each run gets services of its own on free ports (`deepsummit up`, every file under a temporary
folder, the stage cache empty). One worker: the chain and its training flow run on `up`'s worker
(`summit-train/local`). Two workers: the training on a `gpu` pool served by a worker in mount,
PID and UTS namespaces of its own (tests/remote_worker.py), fed the snapshot through the MLflow
server. Prints, per run, the seconds from `prefect deployment run` to its end, the snapshot's
upload (data side) and download (training side), and the ratio two workers / one.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT / "tests"))  # the tests' isolated stack and worker harness

from e2e.stack import Stack  # noqa: E402
from prefect.client.orchestration import get_client  # noqa: E402
from prefect.settings import temporary_settings  # noqa: E402
from remote_worker import create_pool, remote_worker  # noqa: E402

from deepsummit.services import supervisor as services  # noqa: E402

UPLOAD = re.compile(r"published as \S+ in ([\d.]+) s")
DOWNLOAD = re.compile(r"fetched in ([\d.]+) s")


def _seconds(stack: Stack, pattern: re.Pattern[str], flow_run_ids: list[str]) -> float | None:
    logs = stack.post(
        "/logs/filter", {"logs": {"flow_run_id": {"any_": flow_run_ids}}, "limit": 200}
    )
    found = [float(m.group(1)) for log in logs if (m := pattern.search(log["message"]))]
    return sum(found) if found else None


def _run(root: Path, two_workers: bool) -> tuple[float, float | None, float | None]:
    extra = {"train": {"deployment": "summit-train/gpu"}} if two_workers else {}
    stack = Stack(root / "stack", extra)
    try:
        stack.up()
        if not two_workers:
            return _timed(stack)
        prefect = services.prefect_env(stack.settings)
        client_env = {k: v for k, v in prefect.items() if k.startswith("PREFECT_API")}
        client_env["PREFECT_LOGGING_EXTRA_LOGGERS"] = "deepsummit"  # its lines in the run's logs
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


def _timed(stack: Stack) -> tuple[float, float | None, float | None]:
    started = time.monotonic()
    chain = stack.trigger()
    seconds = time.monotonic() - started
    assert stack.wait_finished(chain)["state_type"] == "COMPLETED"
    runs = [chain, stack.training_run(chain)["id"]]
    return seconds, _seconds(stack, UPLOAD, runs), _seconds(stack, DOWNLOAD, runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    timings: dict[str, list[float]] = {"one worker": [], "two workers": []}
    print(f"{'run':<14}{'chain s':>9}{'upload s':>10}{'download s':>12}")
    for repeat in range(args.repeats):
        for name in timings:
            with tempfile.TemporaryDirectory(prefix="deepsummit-two-workers-") as folder:
                seconds, up, down = _run(Path(folder), name == "two workers")
            timings[name].append(seconds)
            show = [f"{v:.1f}" if v is not None else "-" for v in (up, down)]
            print(f"{name:<14}{seconds:>9.1f}{show[0]:>10}{show[1]:>12}  (repeat {repeat + 1})")
    one, two = (statistics.median(timings[k]) for k in timings)
    print(f"median: one worker {one:.1f} s, two workers {two:.1f} s, ratio {two / one:.2f}")


if __name__ == "__main__":
    main()
