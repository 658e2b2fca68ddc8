"""The features stage: attempts, weather windows and leak-free tabular features, split by time,
validated, and written as a content-addressed folder of model arrays.

`build_features` leaves `attempt_candidates`, `attempts`, `attempt_exclusions`,
`weather_windows` and `features` in the warehouse and writes
`settings.features.features_dir/<digest12>/`: features.parquet (the features table),
train/validation/test.npz (`FeatureArrays`) and preprocessing.json (the `Preprocessor` fitted on
the train rows, with the split, weather source and digest). `load_features` reads it back.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from pipeline.config import Settings, SplitConfig
from pipeline.context import RunContext
from pipeline.errors import PipelineError
from pipeline.features.attempts import build_attempts, exclusion_counts
from pipeline.features.dataset import FeatureArrays
from pipeline.features.preprocessing import Preprocessor
from pipeline.features.tabular import attempt_features
from pipeline.features.validation import SPLITS, validate_features
from pipeline.warehouse import connect, frame_digest, run

PREPROCESSING_FILE = "preprocessing.json"
SNAPSHOT_FILE = "features.parquet"


@dataclass(frozen=True)
class SplitFigures:
    years: str
    attempts: int
    label_rate: float | None


@dataclass(frozen=True)
class FeaturesReport:
    splits: dict[str, SplitFigures]
    excluded: dict[str, int]  # member rows kept out, by reason
    members: int  # member rows read = attempts + excluded
    digest: str  # content digest of the features table (features.parquet)
    directory: Path
    weather_source: str
    rows: int  # attempts in the features table

    @property
    def asset_key(self) -> str:
        return (self.directory / SNAPSHOT_FILE).resolve().as_uri()

    def render(self) -> str:
        lines = [
            f"features {self.digest[:12]} (weather source: {self.weather_source})",
            f"  written to {self.directory}",
            "",
            f"  {'split':<12}{'years':<12}{'attempts':>10}{'label rate':>12}",
        ]
        for name, figures in self.splits.items():
            rate = "-" if figures.label_rate is None else f"{figures.label_rate:.4f}"
            lines.append(f"  {name:<12}{figures.years:<12}{figures.attempts:>10,}{rate:>12}")
        lines += ["", "  member rows excluded, by reason:"]
        lines += [f"  {reason:<24}{count:>10,}" for reason, count in self.excluded.items()]
        excluded = sum(self.excluded.values())
        lines += [
            "",
            f"  {self.members:,} member rows = {self.rows:,} attempts + {excluded:,} excluded",
        ]
        return "\n".join(lines)


def _split_years(split: SplitConfig) -> dict[str, str]:
    return {
        "train": f"<= {split.train_until}",
        "validation": f"{split.train_until + 1}-{split.validation_until}",
        "test": f"{split.validation_until + 1}-{split.test_until}",
    }


def build_features(settings: Settings, context: RunContext) -> FeaturesReport:
    """Build the features from the clean tables of the warehouse and write the features folder."""
    config = settings.features
    source = settings.weather.source
    with connect(settings.paths.warehouse) as con:
        windows = build_attempts(con, config, source)
        tabular = attempt_features(
            con, con.table("attempts").pl(), source, config.success_rate_prior_strength
        )
        con.register("tabular_frame", tabular)
        try:
            run(
                con,
                "features_table",
                {
                    "train_until": config.split.train_until,
                    "validation_until": config.split.validation_until,
                },
            )
        finally:
            con.unregister("tabular_frame")
        features = con.table("features").pl()
        excluded = exclusion_counts(con)
        members = con.table("members").aggregate("count(*)").fetchall()[0][0]
    if members != features.height + sum(excluded.values()):
        raise PipelineError(
            f"features: {members} member rows but {features.height} attempts + "
            f"{sum(excluded.values())} excluded"
        )
    validate_features(features, context.run_dir)

    digest = frame_digest(features)
    extra = {
        "digest": digest,
        "split": config.split.model_dump(),
        "success_rate_prior_strength": config.success_rate_prior_strength,
        "max_missing_days": config.max_missing_days,
    }
    by_split = {name: features.filter(pl.col("split") == name) for name in SPLITS}
    preprocessor = Preprocessor.fit(
        by_split["train"], windows, source, config.min_category_count, extra
    )
    directory = config.features_dir / digest[:12]
    _write_folder(directory, features, preprocessor, windows, by_split)

    years = _split_years(config.split)
    return FeaturesReport(
        splits={
            name: SplitFigures(years[name], frame.height, frame["label"].mean())
            for name, frame in by_split.items()
        },
        excluded=excluded,
        members=members,
        digest=digest,
        directory=directory,
        weather_source=source,
        rows=features.height,
    )


def _write_folder(
    directory: Path,
    features: pl.DataFrame,
    preprocessor: Preprocessor,
    windows: pl.DataFrame,
    by_split: dict[str, pl.DataFrame],
) -> None:
    """Write the folder next to its final place, then move it there: a reader never sees a
    half-written folder, and a rebuild of the same digest replaces it whole."""
    staging = directory.with_name(directory.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    features.write_parquet(staging / SNAPSHOT_FILE)
    preprocessor.save(staging / PREPROCESSING_FILE)
    for name, frame in by_split.items():
        preprocessor.transform(frame, windows).save(staging / f"{name}.npz")
    shutil.rmtree(directory, ignore_errors=True)
    staging.rename(directory)


def newest_features_dir(root: Path) -> Path:
    """The most recently written features folder under `root` (staging folders excluded)."""
    folders = [
        p.parent
        for p in root.glob(f"*/{PREPROCESSING_FILE}")
        if not p.parent.name.endswith(".partial")
    ]
    if not folders:
        raise PipelineError(f"{root}: no features snapshot; run `deepsummit features` first")
    return max(folders, key=lambda p: p.stat().st_mtime)


def load_features(directory: Path) -> tuple[dict[str, FeatureArrays], Preprocessor]:
    """The model arrays per split and the preprocessor of a features folder."""
    if not (directory / PREPROCESSING_FILE).exists():
        raise PipelineError(f"{directory}: not a features folder (no {PREPROCESSING_FILE})")
    arrays = {name: FeatureArrays.load(directory / f"{name}.npz") for name in SPLITS}
    return arrays, Preprocessor.load(directory / PREPROCESSING_FILE)
