"""What the train stage costs, before and after, side by side on one machine: wall and CPU
seconds of the whole stage (the evaluation, the baselines, the refit where there is one, the
registration) as each version of the code runs it on its own features snapshot of the bundle;
and whether the two versions answer alike: the evaluation's held-out test predictions and the
registered model's answers on the snapshot's test rows, compared bit for bit (a restructuring
that changes no behaviour must give the same bits, with the same seed on the same machine).

"before" is the code of a past commit (default 65663a7: five trainings of one network on the
seasons to 2015, no refit), read from git into a folder of its own; "after" is this checkout.
Each arm first builds its snapshot (untimed), then its train stage runs in a process of its
own, the arms taking turns; MLflow is a SQLite store under the working folder. CPU seconds are
the operating system's (user + system) of that whole process, imports included, and its
children.

    .venv/bin/python bench/train_stage_cost.py [--before 65663a7] [--runs 1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BEFORE = "65663a7"
WORKDIR = Path(tempfile.gettempdir()) / "deepsummit-train-cost"
ANSWERS = "answers.npz"  # what a train run of an arm answered, beside its snapshot


def code_at(commit: str, folder: Path) -> Path:
    """The commit's src/ and bench/, extracted once under `folder`."""
    from deepsummit.core.sections import PROJECT_ROOT

    root = folder / f"code-{commit}"
    if not root.exists():
        root.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "archive", commit, "src", "bench"], cwd=PROJECT_ROOT, check=True,
            capture_output=True,
        ).stdout  # fmt: skip
        subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
    return root


def run_child(code: Path, mode: str, folder: Path) -> dict[str, float]:
    """This script in `mode` under `code`'s package and benches: its wall seconds and what it
    reports (its CPU seconds, the rows it trained on)."""
    env = {**os.environ, "PYTHONPATH": f"{code / 'src'}{os.pathsep}{code / 'bench'}"}
    started = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, __file__, "--child", mode, "--folder", str(folder)],
        env=env, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    output, _ = child.communicate()
    wall = time.perf_counter() - started
    if child.returncode:
        raise SystemExit(f"{mode} under {code}: exit {child.returncode}")
    reported = json.loads(output.strip().splitlines()[-1])
    return {"wall": wall, **reported}


def child(mode: str, folder: Path) -> None:
    """Runs inside the arm's code: build the snapshot, or time the train stage on it."""
    # The arm's benches (PYTHONPATH), not this checkout's, which Python put first.
    sys.path.remove(str(Path(__file__).resolve().parent))
    import resource

    import mlflow
    import numpy as np
    import polars as pl
    from _bundle import bundle_features, bundle_settings

    from deepsummit.contracts.artifact import ModelArtifact
    from deepsummit.contracts.snapshot import PLANNED_TEST_FILE, newest_features_dir
    from deepsummit.core.context import RunContext
    from deepsummit.serve.scoring import answers
    from deepsummit.train.stage import train_and_register

    if mode == "features":
        if not (folder / "features").exists():
            bundle_features(folder)
        print(json.dumps({}))
        return
    settings = bundle_settings(folder)
    context = RunContext(folder / "runs" / "train")
    snapshot = newest_features_dir(folder / "features")
    report = train_and_register(settings, context, snapshot)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime + usage.ru_stime + children.ru_utime + children.ru_stime
    held_out = pl.read_parquet(
        mlflow.artifacts.download_artifacts(
            run_id=report.mlflow_run_id,
            artifact_path="evaluation/test_predictions.parquet",
            tracking_uri=settings.mlflow.tracking_uri,
        )
    )
    planned = pl.read_parquet(snapshot / PLANNED_TEST_FILE).drop("expid", "member_id", "year")
    served = answers(ModelArtifact.load(context.run_dir / "model"), planned.to_pandas())
    np.savez(
        folder / ANSWERS,
        held_out=held_out["probability"].to_numpy(),
        served=served["probability"].to_numpy(dtype=np.float64),
    )
    rows = report.rows
    trained = rows.get("before test", rows.get("train"))  # the held-out check's training rows
    print(json.dumps({"cpu": cpu, "train_rows": trained, "refit_rows": rows.get("refit", 0)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default=BEFORE, help="the commit to compare with")
    parser.add_argument("--runs", type=int, default=1, help="train-stage runs per arm")
    parser.add_argument("--workdir", type=Path, default=WORKDIR)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.folder)
        return
    arms = {
        f"before ({args.before})": code_at(args.before, args.workdir),
        "after (this checkout)": Path(__file__).resolve().parents[1],
    }
    folders = {name: args.workdir / f"bundle-{i}" for i, name in enumerate(arms)}
    for name, code in arms.items():
        run_child(code, "features", folders[name])
    figures: dict[str, list[dict[str, float]]] = {name: [] for name in arms}
    for _ in range(args.runs):
        for name, code in arms.items():
            figures[name].append(run_child(code, "train", folders[name]))
            print(f"{name}: {figures[name][-1]}", flush=True)
    print(f"\nthe train stage, median of {args.runs} run(s) per arm, arms in turn\n")
    print("| code | rows trained (evaluation / refit) | wall s | CPU s |")
    print("| --- | --- | ---: | ---: |")
    medians = {}
    for name, runs in figures.items():
        wall = sorted(r["wall"] for r in runs)[len(runs) // 2]
        cpu = sorted(r["cpu"] for r in runs)[len(runs) // 2]
        medians[name] = cpu
        first = runs[0]
        refit = f"{int(first['refit_rows']):,}" if first["refit_rows"] else "–"
        print(f"| {name} | {int(first['train_rows']):,} / {refit} | {wall:.0f} | {cpu:.0f} |")
    before, after = medians.values()
    print(f"\nCPU time: before / after = {before / after:.2f}×")
    print(same_answers(*folders.values()))


def same_answers(before: Path, after: Path) -> str:
    """Whether the arms' last train runs answered alike, bit for bit."""
    import numpy as np

    with np.load(before / ANSWERS) as old, np.load(after / ANSWERS) as new:
        lines = []
        for part in ("held_out", "served"):
            same = np.array_equal(old[part], new[part], equal_nan=True)
            largest = float(np.nanmax(np.abs(old[part] - new[part]))) if not same else 0.0
            verdict = "identical, bit for bit" if same else f"differ (largest {largest:.3g})"
            lines.append(f"{part}: {len(new[part]):,} answers {verdict}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
