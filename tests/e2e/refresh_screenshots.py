"""Refresh the README's screenshots from running services and a finished `summit` run.

    .venv/bin/python tests/e2e/refresh_screenshots.py            # after `make train`
    .venv/bin/python tests/e2e/refresh_screenshots.py --flow-run-id <id> --out docs/screenshots

Opens the same pages, with the same checks, as the end-to-end UI test, and writes small PNGs
(1280×800, 256 colours) of the run graph, the event feed entries, the lineage artifact and the
MLflow model and run pages. The lineage expected in the event feed is read from the server's
events, so any completed run can be shown.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: find `e2e`

from e2e.browser import launch_browser
from e2e.ui_checks import (
    MATERIALIZED,
    check_asset_events,
    check_flow_run_stages,
    check_mlflow_model,
    check_mlflow_run,
    check_run_artifacts,
)
from mlflow import MlflowClient

from flows.stages import task_edges
from flows.summit import LINEAGE_ARTIFACT

ROOT = Path(__file__).resolve().parents[2]


def _post(url: str, body: dict) -> dict | list:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def latest_completed_run(prefect_url: str, flow_name: str) -> str:
    runs = _post(
        f"{prefect_url}/api/flow_runs/filter",
        {
            "flows": {"name": {"any_": [flow_name]}},
            "flow_runs": {"state": {"type": {"any_": ["COMPLETED"]}}},
            "sort": "START_TIME_DESC",
            "limit": 1,
        },
    )
    if not runs:
        raise SystemExit(f"{prefect_url}: no completed run of flow {flow_name!r}; run one first")
    return runs[0]["id"]


def lineage_of(prefect_url: str, flow_run_id: str) -> dict[str, list[str]]:
    """asset key → upstream asset keys, from the run's materialisation events."""
    page = _post(
        f"{prefect_url}/api/events/filter",
        {
            "filter": {
                "any_resource": {"id": [f"prefect.flow-run.{flow_run_id}"]},
                "event": {"name": [MATERIALIZED]},
            },
            "limit": 50,
        },
    )
    return {
        event["resource"]["prefect.resource.id"]: [
            r["prefect.resource.id"]
            for r in event["related"]
            if r.get("prefect.resource.role") == "asset"
        ]
        for event in page["events"]
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prefect-url", default="http://127.0.0.1:4200")
    parser.add_argument("--mlflow-url", default="http://127.0.0.1:5000")
    parser.add_argument("--flow", default="summit", help="flow whose latest completed run to show")
    parser.add_argument("--flow-run-id", help="this run instead of the latest completed one")
    parser.add_argument("--model", default="deepsummit", help="registered model name")
    parser.add_argument("--alias", default="champion", help="model version alias to show")
    parser.add_argument("--artifact", default=LINEAGE_ARTIFACT, help="artifact of the run to show")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    # Wide enough that the artifact page's side panel leaves the lineage table whole.
    parser.add_argument("--width", type=int, default=1680, help="viewport width in CSS pixels")
    parser.add_argument("--height", type=int, default=900, help="viewport height in CSS pixels")
    args = parser.parse_args()

    flow_run_id = args.flow_run_id or latest_completed_run(args.prefect_url, args.flow)
    lineage = lineage_of(args.prefect_url, flow_run_id)
    version = MlflowClient(args.mlflow_url).get_model_version_by_alias(args.model, args.alias)
    window = (args.width, args.height)
    with tempfile.TemporaryDirectory() as scratch, launch_browser(Path(scratch), window) as browser:
        check_flow_run_stages(
            browser, args.prefect_url, flow_run_id, [], task_edges(), publish_to=args.out
        )
        check_asset_events(browser, args.prefect_url, flow_run_id, lineage, publish_to=args.out)
        check_run_artifacts(
            browser, args.prefect_url, flow_run_id, {args.artifact: []}, publish_to=args.out
        )
        run_id = check_mlflow_model(
            browser, args.mlflow_url, args.model, version.version, args.alias, args.out
        )
        metrics = sorted(MlflowClient(args.mlflow_url).get_run(run_id).data.metrics)
        check_mlflow_run(browser, args.mlflow_url, run_id, metrics, [], publish_to=args.out)
    print(
        f"screenshots of flow run {flow_run_id} and {args.model} v{version.version} in {args.out}"
    )


if __name__ == "__main__":
    main()
