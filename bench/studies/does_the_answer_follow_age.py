"""Does the answer the champion serves move with the member's age as the records do?

Answer: yes, within 0.08 for every age band of Everest's non-hired spring members of 2010–2019
(the largest gap +0.079, at 60 and over): the answer falls by 0.32 from the youngest band to the
oldest, as the records do. The network alone stays too flat at the oldest end; maps refitted on
the champion's own answers (`--maps`) show it is the age shifts of the served map that close
the gap. Written down in docs/evaluation.md, "Does the served answer follow age?".

The registered champion asked about every member of a peak-season as recorded, by age band:
does the answer served move with the member as the records do?

Every non-hired member of the peak's expeditions of that season in the years given is asked as
the records have them (age, sex, nationality, role; the expedition's route, style, commercial,
oxygen plan and team size; the summit date, with the champion's weather source), through the
path `predict` takes (deepsummit/serve/scoring.py). These are rows the champion learnt from:
a fit it should pass easily. Beside the served mean P, the same answers with the calibration
map undone (the networks' own mean probability), so what the map does is seen apart.

    .venv/bin/python bench/studies/does_the_answer_follow_age.py \
        [--peak EVER --season Spring --years 2010 2019]
        [--model var/runs/<run>/model]   # a model folder instead of the registry's champion
        [--without 2014 2015]            # leave these years out
        [--maps 2018 2019]               # the gaps through maps refitted on these years

`--maps FIRST LAST` asks whether another calibration map would close the gaps: maps fitted on
the champion's own answers to every member row of those years (all peaks, hired staff too, as
the member check takes them; rows it learnt from, so the most a map could do): a temperature,
Platt's scale and shift, and a temperature with one centred logit shift per age band (an L2
penalty of 0.01 on the shifts: the kind of map the recipe serves, deepsummit/contracts/
calibration.py). If even these leave a band off, the gap is the network's, not the map's.

Everest's spring seasons of 2014 and 2015 were closed early (the icefall avalanche of 18 April
2014, the earthquake of 25 April 2015): 16% and none of their non-hired members summited, for
reasons no input foresees. `--without 2014 2015` shows how much of a gap they make.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np
import polars as pl
from scipy.special import expit, logit

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
# Every member row of some years, as the member check judges them (deepsummit/train/recipe.py).
CHECK_MEMBERS = """
SELECT expid, member_id, year, age, label
FROM attempts
WHERE record = 'member' AND year BETWEEN $first AND $last
"""
SHIFT_PENALTY = 0.01  # the L2 penalty on the age bands' shifts
BANDS = ["under 30", "30s", "40s", "50s", "60 and over", "age unknown"]


def champion_artifact(profile: str | None) -> tuple[ModelArtifact, str, str]:
    """The registry's champion: its artifact (files checked against their digest), its
    version and its weather source."""
    settings = load_settings(profile)
    champion = champion_version(settings.mlflow)
    folder = verified_copy(settings.mlflow.tracking_uri, champion, settings.mlflow.model_cache_dir)
    source = champion.tags.get(TAG_WEATHER_SOURCE, settings.weather.source)
    return ModelArtifact.load(folder / ARTIFACT_PATH), f"v{champion.version}", source


def asked_members(warehouse: Path, source: str, query: str, **params: object) -> pl.DataFrame:
    """The attempts of the members `query` selects, as `predict` is asked them, with each
    member's age band and outcome."""
    with connect(warehouse, read_only=True) as con:
        keys = con.sql(query, params=params).pl()
        asked = planned_attempts(con, keys, source)
    return asked.join(keys, on=["expid", "member_id", "year"]).with_columns(
        band=GROUP_FAMILIES["age"].fill_null("age unknown")
    )


def own_logit(artifact: ModelArtifact, asked: pl.DataFrame) -> np.ndarray:
    """The networks' own answer (no map) as the logit a map reads."""
    request = asked.drop("expid", "member_id", "year", "label", "band").to_pandas()
    unmapped = dataclasses.replace(artifact, calibrator=Calibrator("none"))
    return logit(np.clip(score(unmapped, request).probability, 1e-7, 1 - 1e-7))


def by_age(asked: pl.DataFrame, **answers: np.ndarray) -> pl.DataFrame:
    """Per age band: members, their summit rate and the mean of each answer."""
    table = asked.select("band", summited=pl.col("label").cast(pl.Float64)).with_columns(
        **{name: pl.Series(values) for name, values in answers.items()}
    )
    return (
        table.group_by("band")
        .agg(pl.len().alias("members"), pl.col("summited", *answers).mean())
        .sort(pl.col("band").replace_strict(BANDS, list(range(len(BANDS)))))
    )


def refitted_maps(
    artifact: ModelArtifact, warehouse: Path, source: str, years: tuple[int, int]
) -> dict[str, Callable]:
    """Maps fitted on the champion's own answers to every member row of `years`."""
    check = asked_members(warehouse, source, CHECK_MEMBERS, first=years[0], last=years[1])
    z, labels = own_logit(artifact, check), check["label"].cast(pl.Float64).to_numpy()
    fitted = {
        **{f"{m}, refitted": Calibrator.fit(m, z, labels) for m in ("temperature", "platt")},
        "temperature and age shifts, refitted": Calibrator.fit(
            "temperature", z, labels, check, ("age",), SHIFT_PENALTY
        ),
    }
    return {
        "as served": artifact.calibrator.probabilities,
        "none": lambda z, _: expit(z),
        **{name: c.probabilities for name, c in fitted.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peak", default="EVER")
    parser.add_argument("--season", default="Spring")
    parser.add_argument("--years", type=int, nargs=2, default=(2010, 2019))
    parser.add_argument("--model", type=Path, help="a model folder (default: the champion)")
    parser.add_argument("--profile", help="settings profile (the registry, the warehouse)")
    parser.add_argument("--without", type=int, nargs="*", default=[], help="years left out")
    parser.add_argument(
        "--maps", type=int, nargs=2, metavar=("FIRST", "LAST"),
        help="also the gaps through maps refitted on the member rows of these years",
    )  # fmt: skip
    args = parser.parse_args()
    settings = load_settings(args.profile)
    if args.model is None:
        artifact, name, source = champion_artifact(args.profile)
    else:
        artifact, name = ModelArtifact.load(args.model), str(args.model)
        source = artifact.preprocessor.weather_source
    years = [y for y in range(args.years[0], args.years[1] + 1) if y not in args.without]
    asked = asked_members(
        settings.paths.warehouse, source, MEMBERS,
        peak=args.peak, season=args.season, first=years[0], last=years[-1],
    ).filter(pl.col("year").is_in(years))  # fmt: skip
    z = own_logit(artifact, asked)
    table = by_age(asked, served=artifact.calibrator.probabilities(z, asked), own=expit(z))
    table = table.with_columns(gap=pl.col("served") - pl.col("summited"))
    print(
        f"{name} (map: {artifact.calibrator.describe()}), asked about the non-hired members of "
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
    if args.maps:
        print_refitted(artifact, settings.paths.warehouse, source, tuple(args.maps), asked, z)


def print_refitted(
    artifact: ModelArtifact,
    warehouse: Path,
    source: str,
    years: tuple[int, int],
    asked: pl.DataFrame,
    z: np.ndarray,
) -> None:
    """The table's gaps through each map of `refitted_maps`."""
    maps = refitted_maps(artifact, warehouse, source, years)
    table = by_age(asked, **{name: answer(z, asked) for name, answer in maps.items()})
    print(f"\nGap by age band through maps fitted on every member row of {years[0]}–{years[1]}:\n")
    print("| map | " + " | ".join(table["band"]) + " |")
    print("| --- |" + " ---: |" * table.height)
    for name in maps:
        gaps = (table[name] - table["summited"]).to_list()
        print(f"| {name} | " + " | ".join(f"{gap:+.3f}" for gap in gaps) + " |")


if __name__ == "__main__":
    main()
