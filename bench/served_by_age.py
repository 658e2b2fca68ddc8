"""The registered champion asked about every member of a peak-season as recorded, by age band:
does the answer served move with the member as the records do?

Every non-hired member of the peak's expeditions of that season in the years given is asked as
the records have them (age, sex, nationality, role; the expedition's route, style, commercial,
oxygen plan and team size; the summit date, with the champion's weather source), through the
path `predict` takes (deepsummit/serve/scoring.py). These are rows the champion learnt from:
a fit it should pass easily. Beside the served mean P, the same answers with the calibration
map undone (the networks' own mean probability), so what the map does is seen apart.

    .venv/bin/python bench/served_by_age.py [--peak EVER --season Spring --years 2010 2019]
        [--model var/runs/<run>/model]   # a model folder instead of the registry's champion
        [--without 2014 2015]            # leave these years out

Everest's spring seasons of 2014 and 2015 were closed early (the icefall avalanche of 18 April
2014, the earthquake of 25 April 2015): 16% and none of their non-hired members summited, for
reasons no input foresees. `--without 2014 2015` shows how much of a gap they make.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import polars as pl

from deepsummit.contracts.artifact import ModelArtifact
from deepsummit.contracts.calibration import Calibrator
from deepsummit.contracts.champion import (
    ARTIFACT_PATH,
    TAG_WEATHER_SOURCE,
    champion_version,
    verified_copy,
)
from deepsummit.contracts.member_groups import GROUP_FAMILIES
from deepsummit.core.config import load_settings
from deepsummit.core.warehouse import connect
from deepsummit.features.planned import planned_attempts
from deepsummit.serve.scoring import score

TARGET = 0.08  # issue 42: every age group of 50 members or more within this of its rate

MEMBERS = """
SELECT expid, member_id, year, age, label
FROM attempts
WHERE record = 'member' AND peakid = $peak AND season = $season AND NOT hired
    AND year BETWEEN $first AND $last
"""


def champion_artifact(profile: str | None) -> tuple[ModelArtifact, str, str]:
    """The registry's champion: its artifact (files checked against their digest), its
    version and its weather source."""
    settings = load_settings(profile)
    champion = champion_version(settings.mlflow)
    folder = verified_copy(settings.mlflow.tracking_uri, champion, settings.mlflow.model_cache_dir)
    source = champion.tags.get(TAG_WEATHER_SOURCE, settings.weather.source)
    return ModelArtifact.load(folder / ARTIFACT_PATH), f"v{champion.version}", source


def by_age(
    artifact: ModelArtifact, warehouse: Path, source: str, peak: str, season: str, years: list[int]
) -> pl.DataFrame:
    """Per age band: members, their summit rate, the served mean P and the networks' own."""
    with connect(warehouse, read_only=True) as con:
        keys = con.sql(
            MEMBERS, params={"peak": peak, "season": season, "first": years[0], "last": years[-1]}
        ).pl()
        keys = keys.filter(pl.col("year").is_in(years))
        asked = planned_attempts(con, keys, source)
    asked = asked.join(keys, on=["expid", "member_id", "year"])
    request = asked.drop("expid", "member_id", "year", "label").to_pandas()
    served = score(artifact, request).probability
    unmapped = dataclasses.replace(artifact, calibrator=Calibrator("none"))
    own = score(unmapped, request).probability
    band = asked.select(band=GROUP_FAMILIES["age"].fill_null("age unknown"))["band"]
    return (
        pl.DataFrame({"band": band, "label": asked["label"], "served": served, "own": own})
        .group_by("band", maintain_order=True)
        .agg(
            members=pl.len(),
            summited=pl.col("label").cast(pl.Float64).mean(),
            served=pl.col("served").mean(),
            own=pl.col("own").mean(),
        )
        .with_columns(gap=pl.col("served") - pl.col("summited"))
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peak", default="EVER")
    parser.add_argument("--season", default="Spring")
    parser.add_argument("--years", type=int, nargs=2, default=(2010, 2019))
    parser.add_argument("--model", type=Path, help="a model folder (default: the champion)")
    parser.add_argument("--profile", help="settings profile (the registry, the warehouse)")
    parser.add_argument("--without", type=int, nargs="*", default=[], help="years left out")
    args = parser.parse_args()
    settings = load_settings(args.profile)
    if args.model is None:
        artifact, name, source = champion_artifact(args.profile)
    else:
        artifact, name = ModelArtifact.load(args.model), str(args.model)
        source = artifact.preprocessor.weather_source
    years = [y for y in range(args.years[0], args.years[1] + 1) if y not in args.without]
    table = by_age(artifact, settings.paths.warehouse, source, args.peak, args.season, years)
    order = ["under 30", "30s", "40s", "50s", "60 and over", "age unknown"]
    table = table.sort(pl.col("band").replace_strict(order, list(range(len(order)))))
    print(
        f"{name} (map: {artifact.calibrator.method}), asked about the non-hired members of "
        f"{args.peak} {args.season} {years[0]}–{years[-1]}"
        + (f" but {', '.join(map(str, args.without))}" if args.without else "")
        + f" as recorded, weather {source!r}\n"
    )
    print("| age | members | summited | served mean P | gap | networks' own mean P |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for row in table.iter_rows(named=True):
        print(
            f"| {row['band']} | {row['members']:,} | {row['summited']:.3f} | {row['served']:.3f} "
            f"| {row['gap']:+.3f} | {row['own']:.3f} |"
        )
    least = settings.backtest.min_group_members
    counted = table.filter((pl.col("members") >= least) & (pl.col("band") != "age unknown"))
    worst = counted.sort(pl.col("gap").abs(), descending=True).row(0, named=True)
    verdict = "met" if abs(worst["gap"]) <= TARGET else "missed"
    print(
        f"\nlargest gap of an age group of {least}+ members: {worst['gap']:+.3f} "
        f"({worst['band']}); target within {TARGET}: {verdict}"
    )


if __name__ == "__main__":
    main()
