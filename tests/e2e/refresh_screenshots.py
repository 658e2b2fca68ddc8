"""Refresh the README's screenshots from running services, a finished `summit/train` run and,
when there is one, a finished `summit/outlook` run.

    .venv/bin/python tests/e2e/refresh_screenshots.py            # after `make train`
    .venv/bin/python tests/e2e/refresh_screenshots.py --flow-run-id <id> --out docs/screenshots

Opens the same pages, with the same checks, as the end-to-end UI test, and writes small PNGs
(256 colours) of the run graph, the event feed entries, the lineage, summary, drift and progress
artifacts, the outlook artifact with its chart, and the MLflow model and run pages. The lineage
expected in the event feed is read from the server's events, so any completed run can be shown.
It logs in to the Prefect UI with the secret `deepsummit up` keeps (`--prefect-auth-file`, by
default the one `deepsummit status` names).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

# Run as a script: find `e2e` in tests/.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from e2e.browser import launch_browser
from e2e.ui_checks import (
    MATERIALIZED,
    check_asset_events,
    check_flow_run_stages,
    check_mlflow_model,
    check_mlflow_run,
    check_run_artifacts,
    log_in_to_prefect,
)
from mlflow import MlflowClient

from deepsummit.core.config import load_settings
from deepsummit.flows.runner import progress_key
from deepsummit.flows.stages import task_edges
from deepsummit.flows.summit import (
    DRIFT_ARTIFACT,
    LINEAGE_ARTIFACT,
    OUTLOOK_ARTIFACT,
    SUMMARY_ARTIFACT,
)
from deepsummit.serve.outlook import OUTLOOK_CHART_ALT
from deepsummit.services.local import prefect_auth_file
from deepsummit.services.prefect_api import PrefectApi

ROOT = Path(__file__).resolve().parents[2]


def latest_completed_run(prefect: PrefectApi, deployment: str) -> str | None:
    """The newest completed run of `deployment` (flow/name, e.g. summit/train), or None."""
    flow_name, name = deployment.split("/")
    runs = prefect.post(
        "/flow_runs/filter",
        {
            "flows": {"name": {"any_": [flow_name]}},
            "deployments": {"name": {"any_": [name]}},
            "flow_runs": {"state": {"type": {"any_": ["COMPLETED"]}}},
            "sort": "START_TIME_DESC",
            "limit": 1,
        },
    )
    return runs[0]["id"] if runs else None


def lineage_of(prefect: PrefectApi, flow_run_id: str) -> dict[str, list[str]]:
    """asset key → upstream asset keys, from the run's materialisation events."""
    page = prefect.post(
        "/events/filter",
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
    parser.add_argument(
        "--prefect-auth-file",
        type=Path,
        default=prefect_auth_file(load_settings()),
        help="the Prefect server's secret (user:password), as `deepsummit up` wrote it",
    )
    parser.add_argument("--mlflow-url", default="http://127.0.0.1:5000")
    parser.add_argument(
        "--deployment", default="summit/train", help="deployment whose latest run to show"
    )
    parser.add_argument("--flow-run-id", help="this run instead of the latest completed one")
    parser.add_argument("--model", default="deepsummit", help="registered model name")
    parser.add_argument("--alias", default="champion", help="model version alias to show")
    parser.add_argument(
        "--artifacts",
        nargs="*",
        default=[LINEAGE_ARTIFACT, SUMMARY_ARTIFACT, DRIFT_ARTIFACT, progress_key("train")],
        help="artifacts of the run to show",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    # Wide enough that the artifact page's side panel leaves the lineage table whole.
    parser.add_argument("--width", type=int, default=1680, help="viewport width in CSS pixels")
    parser.add_argument("--height", type=int, default=900, help="viewport height in CSS pixels")
    args = parser.parse_args()

    prefect = PrefectApi(f"{args.prefect_url}/api", args.prefect_auth_file.read_text().strip())
    flow_run_id = args.flow_run_id or latest_completed_run(prefect, args.deployment)
    if flow_run_id is None:
        raise SystemExit(f"{prefect.url}: no completed run of {args.deployment}; run one first")
    outlook_run_id = latest_completed_run(prefect, "summit/outlook")
    version = MlflowClient(args.mlflow_url).get_model_version_by_alias(args.model, args.alias)
    window = (args.width, args.height)
    with tempfile.TemporaryDirectory() as scratch, launch_browser(Path(scratch), window) as browser:
        log_in_to_prefect(browser, prefect, flow_run_id)
        check_flow_run_stages(browser, prefect, flow_run_id, [], task_edges(), publish_to=args.out)
        lineage = lineage_of(prefect, flow_run_id)
        check_asset_events(browser, prefect, flow_run_id, lineage, publish_to=args.out)
        artifacts = dict.fromkeys(args.artifacts, ())
        check_run_artifacts(browser, prefect, flow_run_id, artifacts, publish_to=args.out)
        if outlook_run_id is not None:
            check_run_artifacts(
                browser,
                prefect,
                outlook_run_id,
                {OUTLOOK_ARTIFACT: ["best push day"]},
                publish_to=args.out,
                expected_images={OUTLOOK_ARTIFACT: [OUTLOOK_CHART_ALT]},
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
