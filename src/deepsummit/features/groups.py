"""Peak groups: the held-out rows an evaluation reports on separately.

Every peak falls in exactly one group, tested in this order: the peaks with weather from the
snapshot's source (the archive's 8), the other peaks of 8,000 m and above, the ten most climbed
of the remaining peaks, and the rest. Each group's figures are its own: the weather peaks'
AUC is not lifted or lowered by how well the model ranks Ama Dablam against Everest.
"""

from __future__ import annotations

import polars as pl

WEATHER_PEAKS = "weather peaks"
OTHER_8000 = "other 8000 m peaks"
MOST_CLIMBED = "ten most climbed without weather"
REST = "the rest"
PEAK_GROUPS: tuple[str, ...] = (WEATHER_PEAKS, OTHER_8000, MOST_CLIMBED, REST)
MOST_CLIMBED_COUNT = 10


def peak_groups(features: pl.DataFrame) -> pl.DataFrame:
    """peakid → group, from a features table (peakid, heightm, has_weather; every row counts
    towards how much a peak is climbed)."""
    peaks = features.group_by("peakid").agg(
        pl.col("has_weather").any(), pl.col("heightm").max(), attempts=pl.len()
    )
    top = (
        peaks.filter(~pl.col("has_weather") & ~(pl.col("heightm") >= 8000))
        .sort(["attempts", "peakid"], descending=[True, False])
        .head(MOST_CLIMBED_COUNT)["peakid"]
    )
    group = (
        pl.when(pl.col("has_weather"))
        .then(pl.lit(WEATHER_PEAKS))
        .when(pl.col("heightm") >= 8000)
        .then(pl.lit(OTHER_8000))
        .when(pl.col("peakid").is_in(top.to_list()))
        .then(pl.lit(MOST_CLIMBED))
        .otherwise(pl.lit(REST))
    )
    return peaks.select("peakid", group=group).sort("peakid")
