"""The records stage: sources → raw tables → validation → clean tables and quarantine.

Every source is read and validated before the warehouse is opened, so an unreadable input
changes nothing and the write lock is held only for the write. Peaks load first: members and
expeditions are checked against known peaks. The blocking Great Expectations suites run on the
rows about to be written; a table that fails one is not written. Then one transaction replaces
the raw table each source feeds (rows of a source no longer configured go too), rebuilds the
clean tables and the quarantine of the records tables, and commits only if every row read ends
in exactly one place (clean table or quarantine, counted as stored), the raw table holds exactly
the rows read that split into fields, and no clean table shrinks by more than
`ingest.max_shrink` (a truncated download parses fine; `ingest.allow_shrink` accepts a smaller
source on purpose).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import polars as pl

from deepsummit.core import warehouse
from deepsummit.core.config import Settings
from deepsummit.core.context import RunContext
from deepsummit.core.errors import BadInput, PipelineError, disk_space_for
from deepsummit.core.sections import IngestConfig, SourcesConfig
from deepsummit.records import loaders as records
from deepsummit.records.expectations import (
    ExpectationResult,
    clean_table_expectations,
    validate_frames,
)
from deepsummit.records.reading import ROW, Layout, RawTable
from deepsummit.records.validation import Split, columns_of, validate_table

# Load order: peak ids first (the others are checked against them).
TABLES = ("peaks", "expeditions", "expedition_details", "members")
TOP_REASONS = 5


@dataclass(frozen=True)
class SourceCounts:
    """What became of one source's rows."""

    table: str
    source: str
    layout: str
    read: int
    clean: int
    quarantined: int
    top_reasons: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class IngestReport:
    sources: tuple[SourceCounts, ...]
    digests: dict[str, str]  # clean table → its content digest (deepsummit.core.warehouse)
    expectations: tuple[ExpectationResult, ...]
    data_docs: Path  # index.html of the run's Data Docs
    warehouse: Path
    seconds: float
    asset_key: str = field(default="deepsummit://warehouse/records")

    @property
    def rows(self) -> dict[str, int]:
        """Clean rows per table, plus all quarantined records rows."""
        counts = {item.table: item.clean for item in self.sources}
        counts["quarantine"] = sum(item.quarantined for item in self.sources)
        return counts

    @property
    def digest(self) -> str:
        """One digest over the clean tables (changes when any of them changes)."""
        joined = ",".join(f"{name}:{self.digests[name]}" for name in sorted(self.digests))
        return hashlib.sha256(joined.encode()).hexdigest()

    @property
    def expectations_passed(self) -> bool:
        return all(result.success for result in self.expectations)

    def render(self) -> str:
        """The summary the CLI prints."""
        header = ("table", "layout", "read", "clean", "quarantined", "source")
        lines = [
            (s.table, s.layout, s.read, s.clean, s.quarantined, s.source) for s in self.sources
        ]
        widths = [
            max(len(_cell(row[i])) for row in [header, *lines]) for i in range(len(header) - 1)
        ]
        out = [f"Records ingested into {self.warehouse} in {self.seconds:.1f} s"]
        for row in [header, *lines]:
            cells = [
                _cell(value).rjust(width) if isinstance(value, int) else _cell(value).ljust(width)
                for value, width in zip(row[:-1], widths, strict=True)
            ]
            out.append("  ".join([*cells, str(row[-1])]).rstrip())
        reasons = [(s.table, r, n) for s in self.sources for r, n in s.top_reasons]
        if reasons:
            out.append("Top quarantine reasons:")
            out.extend(f"  {table:<12} {count:>7,}  {reason}" for table, reason, count in reasons)
        out.extend(f"Expectations: {result.render()}" for result in self.expectations)
        out.append(f"Data Docs: {self.data_docs}")
        return "\n".join(out)


def _cell(value: object) -> str:
    return f"{value:,}" if isinstance(value, int) else str(value)


def ingest_records(settings: Settings, context: RunContext) -> IngestReport:
    """Load the configured Himalayan sources into the warehouse at settings.paths.warehouse.

    Raises deepsummit.core.errors.SourceUnreadable (one line naming the input) when a source cannot
    be read at all; rows that are only partly wrong go to quarantine with their reason. Raises
    PipelineError, with nothing written, when a clean table fails a blocking expectation or would
    shrink by more than settings.ingest.max_shrink.
    """
    started = time.perf_counter()
    raws = _load_sources(settings)
    splits: dict[str, Split] = {}
    known_peaks: pl.Series | None = None
    for table in TABLES:  # peaks first: the others are checked against its clean peak ids
        splits[table] = validate_table(raws[table].mapped(), table, known_peaks)
        if table == "peaks":
            known_peaks = splits[table].clean["peakid"]
    incoming = {table: splits[table].clean.select(list(columns_of(table))) for table in TABLES}
    context.run_dir.mkdir(parents=True, exist_ok=True)
    # An optional source left out of the configuration has no rows to judge.
    checked = [table for table in TABLES if raws[table].source != records.NOT_CONFIGURED]
    results = validate_frames(
        {table: (incoming[table], clean_table_expectations(table)) for table in checked},
        context.run_dir,
    )
    _refuse_blocking_failures(raws, results)
    path = settings.paths.warehouse
    with (
        disk_space_for("the ingested records", path),
        warehouse.connect(path, lock_timeout_s=settings.warehouse.lock_timeout_s) as con,
    ):
        counts, stored = _write(con, raws, splits, incoming, settings.ingest)
    # The digest of the tables as stored.
    digests = {table: warehouse.frame_digest(frame) for table, frame in stored.items()}
    return IngestReport(
        sources=counts,
        digests=digests,
        expectations=tuple(results.values()),
        data_docs=next(iter(results.values())).docs_index,
        warehouse=path,
        seconds=time.perf_counter() - started,
    )


def source_layouts(sources: SourcesConfig) -> dict[str, tuple[Layout, str | None]]:
    """Each clean table's source: its layout (the raw table it is kept in) and its configured
    location (None: not configured, the table is emptied). The native HDB export, when given,
    replaces the TidyTuesday layout of its table."""
    return {
        "peaks": (records.PEAKS, sources.peaks),
        "expeditions": (
            (records.HDB_EXPEDITIONS, sources.hdb_expeditions)
            if sources.hdb_expeditions
            else (records.EXPEDITIONS, sources.expeditions)
        ),
        "expedition_details": (records.EXPEDITION_DETAILS, sources.expedition_details),
        "members": (
            (records.HDB_MEMBERS, sources.hdb_members)
            if sources.hdb_members
            else (records.MEMBERS, sources.members)
        ),
    }


def _load_sources(settings: Settings) -> dict[str, RawTable]:
    """Every configured source, read in full before anything is written."""
    return {
        table: records.load_source(settings.data_location(location), layout)
        if location
        else records.empty_table(layout)
        for table, (layout, location) in source_layouts(settings.sources).items()
    }


def _refuse_blocking_failures(
    raws: dict[str, RawTable], results: dict[str, ExpectationResult]
) -> None:
    """Stop before writing when a clean table breaks an expectation of severity critical."""
    for table, result in results.items():
        if result.blocking:
            raise BadInput(
                f"{raws[table].source}: the {table} table it gives fails "
                f"{', '.join(result.blocking)}; nothing written (results: {result.results_path})"
            )


def _write(
    con: duckdb.DuckDBPyConnection,
    raws: dict[str, RawTable],
    splits: dict[str, Split],
    incoming: dict[str, pl.DataFrame],
    guards: IngestConfig,
) -> tuple[tuple[SourceCounts, ...], dict[str, pl.DataFrame]]:
    """One transaction: raw tables, clean tables and quarantine rebuilt;
    committed only when no table shrinks too much and the stored counts add up. Returns the
    counts and the clean tables as stored."""
    warehouse.run(con, "ingest_create_tables")
    warehouse.run(con, "quarantine_create_table")
    with warehouse.transaction(con):
        try:
            _refuse_shrinking(con, raws, incoming, guards)
            for table in TABLES:
                raw = raws[table]
                _register(con, "incoming_raw", _raw_rows(raw))
                con.execute(warehouse.sql("ingest_replace_raw").format(raw_table=raw.layout.name))
                _register(con, "incoming_clean", incoming[table])
                con.execute(warehouse.sql("ingest_replace_clean").format(clean_table=table))
            _register(
                con,
                "incoming_quarantine",
                pl.concat([_quarantine(raws[t], splits[t]) for t in TABLES]),
            )
            _register(con, "incoming_scope", pl.DataFrame({"table_name": list(TABLES)}))
            warehouse.run(con, "ingest_replace_quarantine")
            counts = _verified_counts(con, raws)
            stored = {table: con.sql(f'SELECT * FROM "{table}"').pl() for table in TABLES}
        finally:
            for name in ("incoming_raw", "incoming_clean", "incoming_quarantine", "incoming_scope"):
                con.unregister(name)
    return counts, stored


def _refuse_shrinking(
    con: duckdb.DuckDBPyConnection,
    raws: dict[str, RawTable],
    incoming: dict[str, pl.DataFrame],
    guards: IngestConfig,
) -> None:
    """Stop when a clean table would lose more than `guards.max_shrink` of its stored rows."""
    if guards.allow_shrink:
        return
    stored = dict(warehouse.query(con, "ingest_summary").select("table_name", "clean").iter_rows())
    for table in TABLES:
        if raws[table].source == records.NOT_CONFIGURED:
            continue  # emptied on purpose
        before, after = stored[table], incoming[table].height
        if before and (before - after) / before > guards.max_shrink:
            raise BadInput(
                f"{raws[table].source}: would leave {after:,} clean {table} rows where "
                f"{before:,} are stored ({(before - after) / before:.0%} fewer, more than "
                f"ingest.max_shrink = {guards.max_shrink:.0%}); nothing written. A truncated "
                "download? If the source is smaller on purpose, pass --allow-shrink"
            )


def _register(con: duckdb.DuckDBPyConnection, name: str, frame: pl.DataFrame) -> None:
    con.unregister(name)
    con.register(name, frame)


def _raw_rows(raw: RawTable) -> pl.DataFrame:
    return raw.rows.with_columns(_source=pl.lit(raw.source), _load_digest=pl.lit(raw.load_digest))


def _quarantine(raw: RawTable, split: Split) -> pl.DataFrame:
    """Lines that could not be split and rows that failed validation, each with the row as read."""
    rejected = split.rejected.join(raw.records_json(), on=ROW, how="left").select(
        pl.col(ROW).alias("row_number"), "record", "reason"
    )
    return pl.concat([raw.bad_lines, rejected]).with_columns(
        source=pl.lit(raw.source),
        table_name=pl.lit(raw.layout.table),
        load_digest=pl.lit(raw.load_digest),
    )


def _verified_counts(
    con: duckdb.DuckDBPyConnection, raws: dict[str, RawTable]
) -> tuple[SourceCounts, ...]:
    """Counts as stored (before the commit); a row read that is neither clean nor quarantined,
    or a raw table holding other rows than those read (an old source's left behind), stops the
    stage."""
    stored = {row["table_name"]: row for row in warehouse.query(con, "ingest_summary").to_dicts()}
    reasons = warehouse.query(con, "ingest_top_reasons")
    counts = []
    for table in TABLES:
        raw, row = raws[table], stored[table]
        in_raw = con.sql(warehouse.sql("ingest_raw_rows").format(raw_table=raw.layout.name))
        raw_rows = in_raw.pl()["rows"].item()
        # Bad lines are kept in the quarantine only: the raw table holds the rows that split.
        if row["clean"] + row["quarantined"] != raw.rows_read or raw_rows != raw.rows.height:
            raise PipelineError(
                f"{raw.source}: {raw.rows_read} rows read ({raw.rows.height} split into fields) "
                f"but {row['clean']} clean + {row['quarantined']} quarantined, "
                f"{raw_rows} in {raw.layout.name}"
            )
        top = reasons.filter(pl.col("table_name") == table).head(TOP_REASONS)
        counts.append(
            SourceCounts(
                table=table,
                source=raw.source,
                layout=raw.layout.name.removeprefix("raw_"),
                read=raw.rows_read,
                clean=row["clean"],
                quarantined=row["quarantined"],
                top_reasons=tuple(zip(top["reason"], top["rows"], strict=True)),
            )
        )
    return tuple(counts)
