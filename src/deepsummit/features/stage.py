"""The features stage: attempts, weather windows and leak-free tabular features, split by time,
validated, and written as a content-addressed snapshot of model arrays.

`build_features` leaves `attempt_candidates`, `attempts`, `attempt_exclusions`,
`weather_windows`, the history tables and `features` in the warehouse (all of one build: one
transaction writes them) and writes `settings.features.features_dir/<snapshot digest>/` (a link
to the newest generation of that snapshot: deepsummit/features/generations.py):
features.parquet (the features table, every declared input), train/validation/test.npz
(`FeatureArrays` of the configured input set), preprocessing.json (the `Preprocessor` fitted on
the train rows, with the split, weather source and digests), history/<table>.parquet (what a
registered model freezes so that serving computes features as training did) and
planned_test.parquet (the test split as the registered model is asked for it). `load_features`
reads it back.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from deepsummit.contracts.preprocessing import Preprocessor
from deepsummit.contracts.snapshot import (
    HISTORY_DIR,
    PLANNED_TEST_FILE,
    PREPROCESSING_FILE,
    SNAPSHOT_FILE,
    SPLITS,
    WINDOWS_FILE,
)
from deepsummit.core.config import Settings
from deepsummit.core.context import RunContext
from deepsummit.core.errors import PipelineError, disk_space_for
from deepsummit.core.sections import FeaturesConfig, SplitYears
from deepsummit.core.warehouse import (
    connect,
    frame_digest,
    query,
    registered,
    run,
    transaction,
)
from deepsummit.features.attempts import (
    build_attempts,
    exclusion_counts,
    newest_dated_year,
)
from deepsummit.features.generations import publish
from deepsummit.features.planned import planned_attempts
from deepsummit.features.tabular import attempt_features, build_history, history_frames
from deepsummit.features.validation import validate_features


@dataclass(frozen=True)
class SplitFigures:
    years: str
    attempts: int
    label_rate: float | None


@dataclass(frozen=True)
class Exclusion:
    """Member rows one reason kept out of one split (by expedition year), and how often those
    members summited: an exclusion that depends on the outcome shows here."""

    split: str
    record: str  # "member" (a members file row) or "expedition" (a member its record counts)
    reason: str
    members: int
    summit_rate: float | None


@dataclass(frozen=True)
class FeaturesReport:
    splits: dict[str, SplitFigures]
    excluded: dict[str, int]  # member rows kept out, by reason
    exclusions: tuple[Exclusion, ...]  # the same per split, with their summit rate
    member_rows: int  # rows of the members file
    expedition_members: int  # climbing members counted by expeditions without member rows
    digest: str  # content digest of the features table (features.parquet)
    snapshot_digest: str  # of everything in the snapshot folder (its name)
    directory: Path
    weather_source: str
    inputs: tuple[str, ...]  # the tabular inputs of the arrays
    rows: int  # attempts in the features table

    def render(self) -> str:
        lines = [
            f"features {self.digest[:12]} (weather source: {self.weather_source})",
            f"  written to {self.directory}",
            f"  {len(self.inputs)} tabular inputs: {', '.join(self.inputs)}",
            "",
            f"  {'split':<12}{'years':<12}{'attempts':>10}{'label rate':>12}",
        ]
        for name, figures in self.splits.items():
            rate = "-" if figures.label_rate is None else f"{figures.label_rate:.4f}"
            lines.append(f"  {name:<12}{figures.years:<12}{figures.attempts:>10,}{rate:>12}")
        lines += [
            "",
            "  members by split, record and reason they were kept out (summit rate of those rows):",
            f"  {'split':<12}{'record':<12}{'reason':<26}{'members':>10}{'summit rate':>13}",
        ]
        for e in self.exclusions:
            rate = "-" if e.summit_rate is None else f"{e.summit_rate:.3f}"
            lines.append(f"  {e.split:<12}{e.record:<12}{e.reason:<26}{e.members:>10,}{rate:>13}")
        excluded = sum(self.excluded.values())
        lines += [
            "",
            f"  {self.member_rows:,} member rows + {self.expedition_members:,} members counted by "
            f"expedition records = {self.rows:,} attempts + {excluded:,} excluded",
        ]
        return "\n".join(lines)


def build_features(settings: Settings, context: RunContext) -> FeaturesReport:
    """Build the features from the clean tables of the warehouse and write the snapshot."""
    config = settings.features
    source = settings.weather.source
    # One transaction: this build's tables replace the previous build's all together at the
    # commit, once they pass their checks. A build killed or failed before it leaves the
    # previous ones whole (DuckDB rolls back what was not committed, at close or at the next
    # open), never a new `attempts` table beside an old `features` table.
    with connect(settings.paths.warehouse) as con, transaction(con):
        build_history(con)
        split = config.split.years(newest_dated_year(con))
        windows = build_attempts(con, config, source, split.test_until)
        tabular = attempt_features(
            con, con.table("attempts").pl(), config.success_rate_prior_strength
        ).with_columns(weather_source=pl.lit(source))
        with registered(con, tabular_frame=tabular):
            run(
                con,
                "features_table",
                {"train_until": split.train_until, "validation_until": split.validation_until},
            )
        features = con.table("features").pl()
        excluded = exclusion_counts(con)
        exclusions = query(con, "features_exclusions", dataclasses.asdict(split))
        records = query(con, "features_record_counts").row(0, named=True)
        history = history_frames(con)
        test_keys = features.filter(pl.col("split") == "test")
        planned_test = planned_attempts(con, test_keys, source)
        _check_counts(records, features.height, excluded)
        validate_features(features, context.run_dir)

    digest = frame_digest(features)
    snapshot_digest = _snapshot_digest(digest, windows, history, config)
    extra = _provenance(config, split, digest, snapshot_digest)
    by_split = {name: features.filter(pl.col("split") == name) for name in SPLITS}
    inputs = config.model_inputs()
    preprocessor = Preprocessor.fit(
        by_split["train"], windows, inputs, source, config.min_category_count, extra,
        config.rare_peak_attempts,
    )  # fmt: skip
    directory = config.features_dir / snapshot_digest[:12]
    with disk_space_for("the features snapshot", directory):
        _write_folder(directory, features, preprocessor, windows, by_split, history, planned_test)

    return FeaturesReport(
        splits=_split_figures(split, by_split),
        excluded=excluded,
        exclusions=tuple(Exclusion(**row) for row in exclusions.iter_rows(named=True)),
        **records,
        digest=digest,
        snapshot_digest=snapshot_digest,
        directory=directory,
        weather_source=source,
        inputs=inputs.names,
        rows=features.height,
    )


def _provenance(
    config: FeaturesConfig, split: SplitYears, digest: str, snapshot_digest: str
) -> dict[str, Any]:
    """What the preprocessor records of the snapshot it is fitted for: the digests, the split's
    years and the settings its rows were built with."""
    return {
        "digest": digest,
        "snapshot_digest": snapshot_digest,
        "split": dataclasses.asdict(split),
        "success_rate_prior_strength": config.success_rate_prior_strength,
        "max_missing_days": config.max_missing_days,
    }


def _split_figures(split: SplitYears, by_split: dict[str, pl.DataFrame]) -> dict[str, SplitFigures]:
    years = split.describe()
    return {
        name: SplitFigures(years[name], frame.height, frame["label"].mean())
        for name, frame in by_split.items()
    }


def _check_counts(records: dict[str, int], attempts: int, excluded: dict[str, int]) -> None:
    """Every member row and every member an expedition record counts is an attempt or an
    exclusion: nothing is dropped silently."""
    counted = records["member_rows"] + records["expedition_members"]
    if counted != attempts + sum(excluded.values()):
        raise PipelineError(
            f"features: {records['member_rows']} member rows + {records['expedition_members']} "
            f"members counted by expedition records, but {attempts} attempts + "
            f"{sum(excluded.values())} excluded"
        )


def _snapshot_digest(
    features_digest: str,
    windows: pl.DataFrame,
    history: dict[str, pl.DataFrame],
    config: FeaturesConfig,
) -> str:
    """What the snapshot's files follow from: the features table, the weather windows, the
    history tables and the preprocessing settings (the input set among them)."""
    parts = [
        features_digest,
        frame_digest(windows),
        *(f"{name}:{frame_digest(frame)}" for name, frame in sorted(history.items())),
        config.model_dump_json(exclude={"features_dir"}),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _write_folder(
    directory: Path,
    features: pl.DataFrame,
    preprocessor: Preprocessor,
    windows: pl.DataFrame,
    by_split: dict[str, pl.DataFrame],
    history: dict[str, pl.DataFrame],
    planned_test: pl.DataFrame,
) -> None:
    """Write the snapshot as a new generation and turn `directory` to it (deepsummit/features/
    generations.py): a reader of `directory` finds the previous snapshot or this one, whole,
    and a rebuild of the same digest replaces it whole."""

    def write(folder: Path) -> None:
        (folder / HISTORY_DIR).mkdir()
        features.write_parquet(folder / SNAPSHOT_FILE)
        windows.write_parquet(folder / WINDOWS_FILE)
        preprocessor.save(folder / PREPROCESSING_FILE)
        for name, frame in by_split.items():
            preprocessor.transform(frame, windows).save(folder / f"{name}.npz")
        for name, frame in history.items():
            frame.write_parquet(folder / HISTORY_DIR / f"{name}.parquet")
        planned_test.write_parquet(folder / PLANNED_TEST_FILE)

    publish(directory, write)
