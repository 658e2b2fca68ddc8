"""What a person checks in the Prefect and MLflow UIs, read from the rendered pages.

Prefect 3.8.8 serves two UIs: V2 (React, the default for a browser without a saved choice) under
`/v2/`, V1 (Vue) under `/`. These checks use V2:
- With the server's auth on, any page first shows a login form (`/v2/login?redirectTo=…`, one
  password field for the `user:password` secret) and returns to the page asked for.
- `/v2/runs/flow-run/<id>`: the run graph (a canvas, so no text) above tabs; `?tab=TaskRuns`
  lists the task runs by name, `?tab=Artifacts` links each artifact to `/v2/artifacts/key/<key>`.
- `/v2/events?resource=["prefect.flow-run.<id>"]&events=["prefect.asset.materialization.succeeded"]`
  is the Event Feed filtered to one run's materialisations: each card shows the asset (its
  name when the asset has one, else its key) and, under Related Resources, the upstream asset
  keys. An explicit `rangeType=range` window is needed: the default "Past day" ends at the
  current minute rounded down, so events of the last minute are not shown.
- `/v2/events/event/<local date>/<event id>`: one event (its Raw tab renders only the lines in
  view, so a card's event is read whole from the events API by the id in the card's link).
MLflow 3.17.2 (hash routes): `/#/models/<name>`, `/#/models/<name>/versions/<v>`,
`/#/runs/<run id>` (redirects to `/#/experiments/<id>/runs/<run id>`), and
`…/artifacts/<path>`, which previews a PNG as `<img alt="<path>">`.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlencode

from e2e.browser import Browser, PageCheckFailed
from selenium.webdriver.common.by import By

from deepsummit.services.prefect_api import PrefectApi

MATERIALIZED = "prefect.asset.materialization.succeeded"
MATERIALIZED_TITLE = "Asset Materialization Succeeded"
# Canvas drawing of the run graph finishes after the page text; a screenshot waits this long.
GRAPH_SETTLE_SECONDS = 2.0


def prefect_ui(base_url: str) -> str:
    """The V2 UI root for a server root such as http://127.0.0.1:4200."""
    return base_url.rstrip("/") + "/v2"


def log_in_to_prefect(browser: Browser, prefect: PrefectApi, flow_run_id: str) -> None:
    """Log in as a person does: open a run's link, meet the login page the UI shows in its
    place, type the server's secret into its password field, and land on that run.

    The UI keeps the login in the browser's local storage, so later pages open directly.
    """
    ui = prefect_ui(prefect.ui_url)
    browser.open(f"{ui}/runs/flow-run/{flow_run_id}", expect=["Login"])
    if "/login" not in browser.driver.current_url:
        raise PageCheckFailed(f"{browser.driver.current_url}: the run opened without a login")
    browser.driver.find_element(By.CSS_SELECTOR, "input[type=password]").send_keys(
        prefect.auth_string
    )
    browser.click_text("Login")
    browser.wait_until(
        lambda _: (
            []
            if f"/runs/flow-run/{flow_run_id}" in browser.driver.current_url
            else ["the run's page after the login"]
        )
    )
    browser.wait_for_text(["Logout"])


def check_flow_run_stages(
    browser: Browser,
    prefect: PrefectApi,
    flow_run_id: str,
    expected_stages: Sequence[str],
    expected_edges: Collection[tuple[str, str]] = (),
    publish_to: Path | None = None,
) -> str:
    """The run page says Completed, its Task Runs tab lists a run of every stage, and the run
    graph the page draws has an edge for each (upstream stage, downstream stage) expected.

    A task run is named `<task name>-<3 hex>` (or exactly its task_run_name). The graph is a
    canvas, so its edges are read from the graph data the page itself received. Returns the text.
    """
    ui = prefect_ui(prefect.ui_url)

    def missing(text: str) -> list[str]:
        lines = {line.strip() for line in text.splitlines()}
        absent = [s for s in expected_stages if not _names_task_run(lines, s)]
        return absent + ([] if "Completed" in lines else ["Completed"])

    browser.go(f"{ui}/runs/flow-run/{flow_run_id}?tab=TaskRuns")
    text = browser.wait_until(missing)
    browser.screenshot("prefect-task-runs")
    # The default tab keeps the graph at the top of the page: that is the view to show people.
    browser.received_json("/graph-v2")  # forget what earlier pages received
    browser.open(f"{ui}/runs/flow-run/{flow_run_id}", expect=["Task Runs", "Completed"])
    browser.wait_until(lambda _: [] if _has_canvas(browser) else ["run graph canvas"])
    time.sleep(GRAPH_SETTLE_SECONDS)
    browser.screenshot("prefect-run-graph", publish_to=publish_to)
    graphs = browser.received_json(f"/flow_runs/{flow_run_id}/graph-v2")
    if not graphs:
        raise PageCheckFailed(f"{ui}/runs/flow-run/{flow_run_id}: the page fetched no run graph")
    drawn = _graph_edges(graphs[-1])
    absent = [edge for edge in expected_edges if edge not in drawn]
    if absent:
        raise PageCheckFailed(
            f"{ui}/runs/flow-run/{flow_run_id}: the run graph lacks the edges {absent}; "
            f"it has {sorted(drawn)}"
        )
    return text


def _graph_edges(graph: dict) -> set[tuple[str, str]]:
    """(upstream task, downstream task) of a graph-v2 document, by task name (the run's name
    without its `-<3 hex>` suffix)."""
    nodes = {node_id: node for node_id, node in graph["nodes"]}

    def name(node_id: str) -> str:
        return re.sub(r"-[0-9a-f]{3}$", "", nodes[node_id]["label"])

    return {
        (name(parent["id"]), name(node_id))
        for node_id, node in nodes.items()
        for parent in node.get("parents", [])
        if parent["id"] in nodes
    }


def check_asset_events(
    browser: Browser,
    prefect: PrefectApi,
    flow_run_id: str,
    expected_assets: Mapping[str, Collection[str]],
    metadata_fields: Sequence[str] = ("rows", "digest"),
    since: datetime | None = None,
    publish_to: Path | None = None,
    timeout: float = 90,
) -> dict[str, dict]:
    """The run's Event Feed shows one materialisation per asset, naming its upstream assets.

    `expected_assets` maps each asset key to the keys it was built from. Each card must list every
    upstream key under Related Resources; the event itself (its Raw tab) must have exactly that
    asset as resource, those upstream assets, and the metadata fields in its payload.
    Returns asset key → the event a card links to.
    """
    ui = prefect_ui(prefect.ui_url)
    start = since or datetime.now(UTC) - timedelta(days=1)
    query = urlencode(
        {
            "resource": json.dumps([f"prefect.flow-run.{flow_run_id}"]),
            "events": json.dumps([MATERIALIZED]),
            "rangeType": "range",
            "start": _iso(start - timedelta(minutes=5)),
            "end": _iso(datetime.now(UTC) + timedelta(hours=1)),
        }
    )
    feed_url = f"{ui}/events?{query}"

    def missing_cards(text: str) -> list[str]:
        found = text.count(MATERIALIZED_TITLE)
        return (
            []
            if found >= len(expected_assets)
            else [f"{len(expected_assets)} x {MATERIALIZED_TITLE}"]
        )

    browser.go(feed_url)
    browser.wait_until(missing_cards, timeout=timeout, reload_every=5)
    # Scroll the filters and the histogram away: the cards are what people read.
    browser.driver.execute_script(
        "document.querySelector('main a[href*=\"/events/event/\"]')?.scrollIntoView()"
    )
    browser.screenshot("prefect-event-feed", publish_to=publish_to)
    cards = _event_cards(browser)

    events: dict[str, dict] = {}
    for detail_url, card_text in cards:
        event = _card_event(prefect, detail_url)
        key = event["resource"]["prefect.resource.id"]
        if key in expected_assets:
            events[key] = event
            _check_card(key, card_text, expected_assets[key], feed_url)
    problems = [
        f"no materialisation event for {key}" for key in expected_assets if key not in events
    ]
    for key, event in events.items():
        upstream = {
            r["prefect.resource.id"]
            for r in event["related"]
            if r.get("prefect.resource.role") == "asset"
        }
        if upstream != set(expected_assets[key]):
            problems.append(f"{key}: upstream {sorted(upstream)} != {sorted(expected_assets[key])}")
        absent = [f for f in metadata_fields if f not in event.get("payload", {})]
        if absent:
            problems.append(f"{key}: payload lacks {absent}")
    if problems:
        raise PageCheckFailed(f"{feed_url}: " + "; ".join(problems))
    return events


def check_run_artifacts(
    browser: Browser,
    prefect: PrefectApi,
    flow_run_id: str,
    expected: Mapping[str, Sequence[str]],
    expected_links: Mapping[str, Sequence[str]] = {},
    publish_to: Path | None = None,
    expected_images: Mapping[str, Sequence[str]] = {},
) -> None:
    """The run's Artifacts tab lists each artifact key; this run's version shows the texts.

    `expected_links` maps an artifact key to URL prefixes its rendered page must link to;
    `expected_images` to the alt texts of images it must show (loaded, with real pixels).
    """
    ui = prefect_ui(prefect.ui_url)
    browser.open(f"{ui}/runs/flow-run/{flow_run_id}?tab=Artifacts", expect=list(expected))
    browser.screenshot("prefect-run-artifacts")
    for key, contents in expected.items():
        browser.open(f"{ui}/artifacts/key/{key}", expect=[key])
        browser.wait_until(lambda _: [] if browser.links("/artifacts/artifact/") else ["versions"])
        for url in browser.links("/artifacts/artifact/"):
            browser.open(url, expect=["Flow Run"])
            if browser.links(f"/runs/flow-run/{flow_run_id}"):
                browser.wait_for_text(contents)
                absent = [p for p in expected_links.get(key, ()) if not browser.links(p)]
                if absent:
                    raise PageCheckFailed(f"{url}: no link to {absent}")
                browser.wait_until(
                    lambda _, k=key: [
                        alt
                        for alt in expected_images.get(k, ())
                        if alt not in browser.loaded_images()
                    ]
                )
                browser.screenshot(f"prefect-artifact-{key}", publish_to=publish_to)
                break
        else:
            raise PageCheckFailed(f"{ui}/artifacts/key/{key}: no version from run {flow_run_id}")


def check_prefect_flow_run(
    browser: Browser,
    prefect: PrefectApi,
    flow_run_id: str,
    expected_stages: Sequence[str],
    expected_assets: Mapping[str, Collection[str]],
    expected_edges: Collection[tuple[str, str]] = (),
    expected_artifacts: Mapping[str, Sequence[str]] = {},
    expected_links: Mapping[str, Sequence[str]] = {},
    publish_to: Path | None = None,
    expected_images: Mapping[str, Sequence[str]] = {},
) -> dict[str, dict]:
    """All the Prefect UI checks of one flow run, from the login on; returns the asset events
    (key → event)."""
    log_in_to_prefect(browser, prefect, flow_run_id)
    check_flow_run_stages(
        browser, prefect, flow_run_id, expected_stages, expected_edges, publish_to
    )
    events = check_asset_events(
        browser, prefect, flow_run_id, expected_assets, publish_to=publish_to
    )
    check_run_artifacts(
        browser,
        prefect,
        flow_run_id,
        expected_artifacts,
        expected_links,
        publish_to,
        expected_images,
    )
    return events


def check_mlflow_model(
    browser: Browser,
    base_url: str,
    model_name: str,
    version: int | str,
    alias: str = "champion",
    publish_to: Path | None = None,
) -> str:
    """The registered model page lists the version carrying `@alias`; returns its source run id."""
    base = base_url.rstrip("/")
    version_label = f"Version {version}"
    _quiet_mlflow_ui(browser, base)

    def alias_on_version(text: str) -> list[str]:
        # The versions table reads row by row: "Version N", date, tags, aliases, description.
        row = text.partition(version_label + "\n")[2].split("\nVersion ", 1)[0]
        return [] if f"@ {alias}" in row else [f"{version_label} with @ {alias}"]

    browser.open(f"{base}/#/models/{model_name}", expect=[model_name, version_label])
    browser.wait_until(alias_on_version)
    browser.screenshot("mlflow-model", publish_to=publish_to)
    browser.open(
        f"{base}/#/models/{model_name}/versions/{version}",
        expect=[version_label, "Aliases", f"@ {alias}", "Source Run"],
    )
    # The source run's link comes with a later request than the page's text.
    browser.wait_until(lambda _: [] if browser.links("/runs/") else ["a link to the source run"])
    browser.screenshot("mlflow-model-version")
    runs = [re.search(r"/runs/([0-9a-f]{32})", url) for url in browser.links("/runs/")]
    run_ids = {match.group(1) for match in runs if match}
    if len(run_ids) != 1:
        raise PageCheckFailed(f"{browser.driver.current_url}: source run links {sorted(run_ids)}")
    return run_ids.pop()


def check_mlflow_run(
    browser: Browser,
    base_url: str,
    run_id: str,
    metrics: Sequence[str],
    plots: Sequence[str],
    publish_to: Path | None = None,
) -> dict[str, float]:
    """The run page lists each metric with a number, and each plot previews as an image.

    Returns metric → value as displayed.
    """
    base = base_url.rstrip("/")
    _quiet_mlflow_ui(browser, base)
    browser.open(f"{base}/#/runs/{run_id}", expect=["Metrics (", *metrics])
    run_url = browser.driver.current_url.split("?")[0]
    shown = _metric_values(browser.text(), metrics)
    browser.screenshot("mlflow-run", publish_to=publish_to)
    if set(shown) != set(metrics):
        raise PageCheckFailed(f"{run_url}: metrics without a number: {set(metrics) - set(shown)}")
    for plot in plots:
        browser.go(f"{run_url}/artifacts/{plot}")
        browser.wait_until(
            lambda _, p=plot: [] if p in browser.loaded_images() else [f"<img alt={p}>"]
        )
        browser.screenshot("mlflow-plot-" + Path(plot).stem, publish_to=publish_to)
    return shown


def _quiet_mlflow_ui(browser: Browser, base: str) -> None:
    """The classic "Model training" navigation, without the assistant panel over the page.

    Only the look of the screenshots depends on this (the browser's saved UI choices).
    """
    browser.open(f"{base}/#/", expect=["Model training"])
    browser.driver.execute_script(
        "localStorage.setItem('mlflow.workflowType_v1', '\"machine_learning\"');"
        "localStorage.setItem('mlflow.assistant.panelOpen_v1', 'false');"
        "localStorage.setItem('mlflow.assistant.fab.autoOpenedOnFirstLoad_v1', 'true');"
    )


def _names_task_run(lines: set[str], stage: str) -> bool:
    pattern = re.compile(rf"{re.escape(stage)}(-[0-9a-f]{{3}})?")
    return any(pattern.fullmatch(line) for line in lines)


def _has_canvas(browser: Browser) -> bool:
    return bool(
        browser.driver.execute_script("return document.querySelector('main canvas') !== null")
    )


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _event_cards(browser: Browser) -> list[tuple[str, str]]:
    """(detail page URL, card text) for every event card of the feed page."""
    # A card is the nearest ancestor of the event's link that also holds "Related Resources".
    return browser.driver.execute_script(
        """
        return [...document.querySelectorAll('main a[href*="/events/event/"]')].map(a => {
            let card = a;
            while (card && !card.innerText.includes('Related Resources')) card = card.parentElement;
            return [a.href, card ? card.innerText : ''];
        });
        """
    )


def _card_event(prefect: PrefectApi, detail_url: str) -> dict:
    """The event a feed card links to, read from the events API by the id in the card's link.

    (The Raw tab's code view renders only the lines in view, so long events cannot be read
    whole from the page; what the card itself shows is checked against this event.)
    """
    event_id = detail_url.split("?")[0].rstrip("/").rsplit("/", 1)[1]
    found = prefect.post("/events/filter", {"filter": {"id": {"id": [event_id]}}, "limit": 1})
    (event,) = found["events"]
    return event


def _check_card(key: str, card: str, upstream: Collection[str], feed_url: str) -> None:
    related = card.partition("Related Resources")[2]
    lines = {line.strip() for line in related.splitlines()}
    absent = [u for u in upstream if u not in lines]
    if absent:
        raise PageCheckFailed(f"{feed_url}: the card of {key} does not name upstream {absent}")


def _metric_values(text: str, metrics: Sequence[str]) -> dict[str, float]:
    """metric → the number on the line after its name in the run page's metrics table."""
    lines = [line.strip() for line in text.splitlines()]
    values: dict[str, float] = {}
    for name in metrics:
        for index, line in enumerate(lines[:-1]):
            if line == name:
                try:
                    values[name] = float(lines[index + 1])
                    break
                except ValueError:
                    continue
    return values
