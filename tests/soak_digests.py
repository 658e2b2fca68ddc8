"""Digests of what a nightly run leaves, and the soak's verdicts on them from one night to the
next: each warehouse table, the features snapshot and the registry must be the night before's
or a complete new one, never a mix; a night that ends Crashed leaves all of them as they were.

"Complete" is checkable for each: a warehouse table and the snapshot hold what a clean load of
the same bundle in a fresh folder holds (`clean_load`, once per soak; a night reloads the same
bundle, so its tables and snapshot come out the same, and a half-written one does not); the
registry keeps every version it had unchanged, and each new one carries its files' digest and
no unverified mark, as does the version the champion alias names.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import duckdb
import polars as pl
from flows_fixtures import isolated_paths
from mlflow import MlflowClient

from deepsummit.contracts.champion import TAG_FILES_DIGEST, TAG_UNVERIFIED
from deepsummit.contracts.snapshot import newest_features_dir
from deepsummit.core.config import Settings, deep_merge, load_settings
from deepsummit.core.context import RunContext
from deepsummit.core.errors import PipelineError
from deepsummit.core.sections import MlflowConfig
from deepsummit.core.warehouse import frame_digest
from deepsummit.features.stage import build_features
from deepsummit.records.stage import ingest_records
from deepsummit.weather import load_weather

# Columns that say when or by which request a row was written, not what it holds: a reload of
# the same bundle writes them anew.
WRITE_TIME_COLUMNS = frozenset({"quarantined_at", "fetched_at", "request_id", "sent_at"})
ITEMS = ("warehouse", "snapshot", "registry")
SAME = "as the night before"
NEW = "new, complete"
MIX = "MIX"


@dataclass(frozen=True)
class Digests:
    tables: dict[str, str]  # warehouse table → digest of its rows
    snapshot: dict[str, str]  # the newest features snapshot's files → digest of their bytes
    versions: dict[str, str]  # registered version → digest of its source, run, status, tags
    unverified: frozenset[str]  # versions without their files' digest, or marked unverified
    champion: str  # the version the champion alias names; "" where none

    def digest(self, item: str) -> str:
        """One short digest of an item, for the report."""
        parts = {
            "warehouse": sorted(self.tables.items()),
            "snapshot": sorted(self.snapshot.items()),
            "registry": [sorted(self.versions.items()), self.champion],
        }[item]
        return _sha(json.dumps(parts))[:12] if parts else "(none)"


def take_digests(settings: Settings) -> Digests:
    """The digests of what the runs of `settings` left. Reads the warehouse, so only while no
    process writes it."""
    versions, unverified, champion = _registry(settings.mlflow)
    return Digests(
        _table_digests(settings.paths.warehouse),
        _snapshot_files(settings.features.features_dir),
        versions,
        unverified,
        champion,
    )


def clean_load(root: Path, bundle: Path, profile: str) -> Digests:
    """The digests of the warehouse and snapshot a clean load of `bundle` leaves in a new
    folder: the stages that write them (records, weather, features), called as plain
    functions. No registry."""
    overrides = deep_merge(isolated_paths(root), {"paths": {"data_dir": str(bundle)}})
    settings = load_settings(profile, overrides)
    context = RunContext(settings.paths.runs_dir / "clean-load")
    ingest_records(settings, context)
    load_weather(settings, context)
    build_features(settings, context)
    return Digests(
        _table_digests(settings.paths.warehouse),
        _snapshot_files(settings.features.features_dir),
        {},
        frozenset(),
        "",
    )


def _sha(text: str | bytes) -> str:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


def _table_digests(warehouse: Path) -> dict[str, str]:
    """Table → a digest of its rows that ignores their order (the sum of DuckDB's row hashes,
    which a duplicated or lost row changes) and the write-time columns."""
    if not warehouse.exists():
        return {}
    digests = {}
    with duckdb.connect(str(warehouse), read_only=True) as con:
        tables = con.execute("SELECT table_name FROM duckdb_tables() ORDER BY 1").fetchall()
        for (table,) in tables:
            columns = [c for c in con.table(table).columns if c not in WRITE_TIME_COLUMNS]
            listed = ", ".join(f'"{column}"' for column in columns)
            rows, total = con.execute(
                f'SELECT count(*), coalesce(sum(hash({listed})::HUGEINT), 0) FROM "{table}"'
            ).fetchone()
            digests[table] = _sha(f"{listed}|{rows}|{total}")[:16]
    return digests


def _snapshot_files(features_dir: Path) -> dict[str, str]:
    """The newest snapshot's files (`<snapshot>/<path in it>`) → a digest of what they hold;
    empty where there is no snapshot yet. A table's digest is of its rows in any order
    (`frame_digest`, as the snapshot's own name is): a rebuild writes the history tables in
    an order that varies with the threads' timing, the same rows in other bytes."""
    try:
        folder = newest_features_dir(features_dir)
    except PipelineError:
        return {}
    files = sorted(path for path in folder.resolve().rglob("*") if path.is_file())
    return {
        f"{folder.name}/{path.relative_to(folder.resolve())}": (
            frame_digest(pl.read_parquet(path))
            if path.suffix == ".parquet"
            else _sha(path.read_bytes())
        )[:16]
        for path in files
    }


def _registry(config: MlflowConfig) -> tuple[dict[str, str], frozenset[str], str]:
    """Each registered version's digest, the versions not verified, and the champion."""
    client = MlflowClient(tracking_uri=config.tracking_uri)
    name = config.registered_model
    versions, unverified = {}, set()
    for version in client.search_model_versions(f"name='{name}'"):
        held = [version.source, version.run_id, version.status, sorted(version.tags.items())]
        versions[version.version] = _sha(json.dumps(held))[:16]
        if not version.tags.get(TAG_FILES_DIGEST) or TAG_UNVERIFIED in version.tags:
            unverified.add(version.version)
    models = client.search_registered_models(filter_string=f"name = '{name}'")
    champion = models[0].aliases.get(config.champion_alias, "") if models else ""
    return versions, frozenset(unverified), champion


# ---------------------------------------------------------------- the verdicts


def judge(before: Digests, after: Digests, clean: Digests) -> dict[str, str]:
    """Item → what its digests showed after a night, from the night before's: SAME, NEW
    (complete) or MIX, with the item's digest and the detail."""
    verdicts = {
        "warehouse": _tables_verdict(before.tables, after.tables, clean.tables),
        "snapshot": _snapshot_verdict(before.snapshot, after.snapshot, clean.snapshot),
        "registry": _registry_verdict(before, after),
    }
    return {item: f"{after.digest(item)} {verdicts[item]}" for item in ITEMS}


def failures(
    verdicts: dict[str, str], after: Digests, clean: Digests, state: str, trained: bool
) -> list[str]:
    """What the verdicts of a night that ended in `state` should not have shown: a mix; a
    change where the night ended Crashed; anything but the complete state where it ended
    Completed. `trained`: the night's training flow run completed. It runs in a process of its
    own, which a chain killed under it does not take along: the registry may then hold the
    version it registered, complete."""
    found = [f"{item} is a mix" for item, verdict in verdicts.items() if MIX in verdict]
    if state == "CRASHED":
        may_change = {"registry"} if trained else set()
        found += [
            f"{item} changed in a Crashed night"
            for item in ITEMS
            if SAME not in verdicts[item] and item not in may_change
        ]
    if state == "COMPLETED":
        if after.tables != clean.tables or after.snapshot != clean.snapshot:
            found.append("a completed night left another warehouse or snapshot than a clean load")
        if not after.champion or after.champion in after.unverified:
            found.append(f"a completed night left no verified champion ({after.champion or '-'})")
    return found


def _one_verdict(before: str, after: str, clean: str) -> str:
    if after == before:
        return SAME
    return NEW if after == clean else f"{MIX}: neither the night before's nor a clean load's"


def _snapshot_verdict(before: dict[str, str], after: dict[str, str], clean: dict[str, str]) -> str:
    """SAME, NEW where it is a clean load's, else MIX naming what differs from a clean load's:
    a snapshot is one whole, not files each of either."""
    if after == before:
        return SAME
    if after == clean:
        return NEW
    differ = sorted(f for f in after.keys() | clean.keys() if after.get(f) != clean.get(f))
    return f"{MIX}: neither the night before's nor a clean load's ({', '.join(differ)})"


def _tables_verdict(before: dict[str, str], after: dict[str, str], clean: dict[str, str]) -> str:
    """SAME where every table is; NEW where each is the night before's or a clean load's and
    at least one is new; else MIX, naming the tables that are neither."""
    tables = sorted(before.keys() | after.keys())
    verdicts = {
        t: _one_verdict(before.get(t, ""), after.get(t, ""), clean.get(t, "")) for t in tables
    }
    mixed = [t for t, verdict in verdicts.items() if verdict.startswith(MIX)]
    if mixed:
        return f"{MIX}: {', '.join(mixed)} neither the night before's nor a clean load's"
    renewed = sum(verdict == NEW for verdict in verdicts.values())
    return SAME if not renewed else f"{NEW} ({renewed} of {len(tables)} tables new)"


def _registry_verdict(before: Digests, after: Digests) -> str:
    """SAME where nothing changed; NEW where every version the registry had is unchanged, each
    new one is verified and the champion is; else MIX, saying what is wrong."""
    if after.versions == before.versions and after.champion == before.champion:
        return f"{SAME} (champion v{after.champion or '-'})"
    wrong = [
        f"v{v} changed or vanished"
        for v, digest in before.versions.items()
        if after.versions.get(v) != digest
    ]
    added = sorted(after.versions.keys() - before.versions.keys(), key=int)
    wrong += [f"v{v} unverified" for v in added if v in after.unverified]
    if after.champion and after.champion in after.unverified:
        wrong.append(f"champion v{after.champion} unverified")
    if wrong:
        return f"{MIX}: {'; '.join(wrong)}"
    return f"{NEW} (v{', v'.join(added) or '-'} registered, champion v{after.champion or '-'})"
