"""Each stage's declaration (deepsummit/flows/stages.py) lists what it really writes: every stage
of both chains runs, as plain functions, on a two-peak slice (weather and forecast from the
local Open-Meteo server, a SQLite MLflow store), and the warehouse tables it created or changed
are compared with the tables of its declared writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from flows_fixtures import isolated_paths, write_bundle_slice
from openmeteo_server import OpenMeteoServer

from deepsummit.core.config import Settings, load_settings
from deepsummit.core.context import RunContext
from deepsummit.core.warehouse import connect, frame_digest
from deepsummit.flows.resources import RESOURCES
from deepsummit.flows.stages import CHAIN, OUTLOOK_CHAIN, Stage, written


def table_states(settings: Settings) -> dict[str, str]:
    """Table → content digest, of every table in the warehouse."""
    if not settings.paths.warehouse.exists():
        return {}
    with connect(settings.paths.warehouse, read_only=True) as con:
        names = con.sql("SELECT table_name FROM information_schema.tables").pl()["table_name"]
        return {name: frame_digest(con.sql(f'SELECT * FROM "{name}"').pl()) for name in names}


def declared_tables(stage: Stage, settings: Settings) -> set[str]:
    return {table for resource in written(stage, settings) for table in resource.tables}


def run(stage: Stage, settings: Settings, root: Path) -> Any:
    locations = {
        name: location
        for name in stage.reads
        if (location := RESOURCES[name].location(settings)) is not None
    }
    return stage.load()(settings, RunContext(root / "runs" / stage.name), **locations)


@pytest.fixture(scope="module")
def changes(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, tuple[set[str], set[str], set[str]]]:
    """Stage → (tables it created or changed, tables it declares, tables after it ran)."""
    root = tmp_path_factory.mktemp("declarations")
    overrides = isolated_paths(root)
    overrides["paths"]["data_dir"] = str(write_bundle_slice(root / "data"))
    overrides["mlflow"] = {"tracking_uri": f"sqlite:///{root / 'mlflow.db'}"}
    found = {}
    with OpenMeteoServer() as server:
        # The local server counts no quota: the free tier's minute and hour windows would only
        # make the weather stage sleep through most of this test.
        overrides["weather"].update(
            source="open-meteo",
            api_url=server.url,
            limits={"per_minute": 1e9, "per_hour": 1e9},
        )
        overrides["forecast"].update(api_url=server.forecast_url)
        overrides["outlook"] = {"peaks": ["KANG"], "days": 2}
        settings = load_settings("tiny", overrides)
        for stage in (*CHAIN, *OUTLOOK_CHAIN):
            before = table_states(settings)
            run(stage, settings, root)
            after = table_states(settings)
            changed = {table for table, digest in after.items() if before.get(table) != digest}
            found[stage.name] = (changed, declared_tables(stage, settings), set(after))
    return found


@pytest.mark.parametrize("stage", [stage.name for stage in (*CHAIN, *OUTLOOK_CHAIN)])
def test_a_stage_writes_only_what_it_declares(changes, stage: str) -> None:
    changed, declared, _ = changes[stage]
    assert changed <= declared, f"{stage} writes undeclared tables {sorted(changed - declared)}"


@pytest.mark.parametrize("stage", [stage.name for stage in (*CHAIN, *OUTLOOK_CHAIN)])
def test_every_declared_table_is_there_after_the_stage(changes, stage: str) -> None:
    _, declared, present = changes[stage]
    assert declared <= present, f"{stage} declares {sorted(declared - present)}: never written"


def test_the_features_stage_declares_its_intermediate_tables(changes) -> None:
    changed, _, _ = changes["features"]
    assert {"attempts", "attempt_exclusions", "weather_windows", "history_seasons"} <= changed
    assert {"weather_api_calls", "quarantine"} <= changes["weather"][1]
