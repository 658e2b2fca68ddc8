"""The records stage: sources → raw tables → validation → clean tables and quarantine.

Every source is read before anything is written, so an unreadable input changes nothing; then
one transaction replaces each source's raw rows, rebuilds the clean tables and the quarantine of
the records tables. Peaks load first: members and expeditions are checked against known peaks.
Every row read ends in exactly one place (clean table or quarantine), and that is verified on
the stored tables before the stage reports.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import polars as pl

from pipeline import warehouse
from pipeline.config import Settings
from pipeline.context import RunContext
from pipeline.errors import PipelineError
from pipeline.records import loaders as records
from pipeline.records.expectations import (
    ExpectationResult,
    clean_table_expectations,
    validate_frames,
)
from pipeline.records.loaders import ROW, RawTable
from pipeline.records.validation import Split, columns_of, validate_table

TABLES = ("peaks", "expeditions", "members")  # load order: peak ids first
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
    digests: dict[str, str]  # clean table → its content digest (pipeline.warehouse)
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

    Raises pipeline.errors.SourceUnreadable (one line naming the input) when a source cannot be
    read at all; rows that are only partly wrong go to quarantine with their reason.
    """
    started = time.perf_counter()
    raws = _load_sources(settings)
    splits: dict[str, Split] = {}
    known_peaks: pl.Series | None = None
    for table in TABLES:  # peaks first: the others are checked against its clean peak ids
        splits[table] = validate_table(raws[table].mapped(), table, known_peaks)
        if table == "peaks":
            known_peaks = splits[table].clean["peakid"]
    path = settings.paths.warehouse
    with warehouse.connect(path) as con:
        _write(con, raws, splits)
        counts = _verified_counts(con, raws)
        stored = {table: con.sql(f'SELECT * FROM "{table}"').pl() for table in TABLES}
    # The same digest as warehouse.table_digest, from the frames read once for the suite too.
    digests = {table: warehouse.frame_digest(frame) for table, frame in stored.items()}
    context.run_dir.mkdir(parents=True, exist_ok=True)
    results = validate_frames(
        {table: (stored[table], clean_table_expectations(table)) for table in TABLES},
        context.run_dir,
    )
    return IngestReport(
        sources=counts,
        digests=digests,
        expectations=tuple(results[table] for table in TABLES),
        data_docs=next(iter(results.values())).docs_index,
        warehouse=path,
        seconds=time.perf_counter() - started,
    )


def _load_sources(settings: Settings) -> dict[str, RawTable]:
    """Every configured source, read in full before anything is written."""
    sources = settings.sources
    location = settings.data_location
    peaks = records.load_peaks(location(sources.peaks))
    if sources.hdb_expeditions:
        expeditions = records.load_hdb(location(sources.hdb_expeditions), records.HDB_EXPEDITIONS)
    else:
        expeditions = records.load_expeditions(location(sources.expeditions))
    if sources.hdb_members:
        members = records.load_hdb(location(sources.hdb_members), records.HDB_MEMBERS)
    else:
        members = records.load_members(location(sources.members))
    return {"peaks": peaks, "expeditions": expeditions, "members": members}


def _write(
    con: duckdb.DuckDBPyConnection, raws: dict[str, RawTable], splits: dict[str, Split]
) -> None:
    """One transaction: raw rows replaced per source, clean tables and quarantine rebuilt."""
    warehouse.run(con, "ingest_create_tables")
    warehouse.run(con, "quarantine_create_table")
    con.begin()
    try:
        for table in TABLES:
            raw, split = raws[table], splits[table]
            _register(con, "incoming_raw", _raw_rows(raw))
            con.execute(warehouse.sql("ingest_replace_raw").format(raw_table=raw.layout.name))
            _register(con, "incoming_clean", split.clean.select(list(columns_of(table))))
            con.execute(warehouse.sql("ingest_replace_clean").format(clean_table=table))
        _register(
            con, "incoming_quarantine", pl.concat([_quarantine(raws[t], splits[t]) for t in TABLES])
        )
        _register(con, "incoming_scope", pl.DataFrame({"table_name": list(TABLES)}))
        warehouse.run(con, "ingest_replace_quarantine")
        con.commit()
    except BaseException:
        con.rollback()
        raise
    finally:
        for name in ("incoming_raw", "incoming_clean", "incoming_quarantine", "incoming_scope"):
            con.unregister(name)


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
    """Counts as stored; a row read that is neither clean nor quarantined stops the stage."""
    stored = {row["table_name"]: row for row in warehouse.query(con, "ingest_summary").to_dicts()}
    reasons = warehouse.query(con, "ingest_top_reasons")
    counts = []
    for table in TABLES:
        raw, row = raws[table], stored[table]
        if row["clean"] + row["quarantined"] != raw.rows_read:
            raise PipelineError(
                f"{raw.source}: {raw.rows_read} rows read but {row['clean']} clean + "
                f"{row['quarantined']} quarantined"
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
