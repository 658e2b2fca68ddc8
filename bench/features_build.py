"""Wall time of the features build on the data bundle: the vectorised DuckDB SQL of the
features stage against a straightforward pandas loop that builds each weather window on its own
(the seed system's approach), on the same data in one run. Checks that both give the same
windows on a sample, then prints a markdown table.

    .venv/bin/python bench/features_build.py [--sample 200]
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
from _bundle import bundle_warehouse

from deepsummit.contracts.preprocessing import window_tensors
from deepsummit.core.inputs import (
    DIRECTION_CHANNELS,
    DIRECTION_VARIABLE,
    WEATHER_CHANNELS,
    WEATHER_VARIABLES,
    WINDOW_DAYS,
    WINDOW_SCALES,
)
from deepsummit.features.attempts import build_attempts
from deepsummit.features.tabular import attempt_features, build_history


def pandas_window(weather: pd.DataFrame, peakid: str, date: pd.Timestamp) -> np.ndarray:
    """One 26×16 window, the seed way: filter the daily frame, then loop over the buckets (the
    wind direction as the mean of its sine and of its cosine, in the arrays' channel order)."""
    days = weather[
        (weather["peakid"] == peakid)
        & (weather["date"] > date - pd.Timedelta(days=WINDOW_DAYS))
        & (weather["date"] <= date)
    ]
    tokens = []
    for scale in WINDOW_SCALES:
        for bucket in range(scale.tokens):
            newest = (scale.tokens - 1 - bucket) * scale.days_per_token
            start = date - pd.Timedelta(days=newest + scale.days_per_token - 1)
            end = date - pd.Timedelta(days=newest)
            chunk = days[(days["date"] >= start) & (days["date"] <= end)]
            token: dict[str, float] = {}
            for name in WEATHER_VARIABLES:
                values = chunk[name].dropna()
                direction = name == DIRECTION_VARIABLE
                channels = DIRECTION_CHANNELS if direction else (name,)
                if values.empty:
                    means = [math.nan] * len(channels)
                elif direction:
                    radians = np.radians(values)
                    means = [np.sin(radians).mean(), np.cos(radians).mean()]
                else:
                    means = [values.mean()]
                token.update(zip(channels, means, strict=True))
            tokens.append([token[channel] for channel in WEATHER_CHANNELS])
    return np.array(tokens)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=200, help="windows compared for equality")
    args = parser.parse_args()
    settings = bundle_warehouse(Path(tempfile.mkdtemp(prefix="features-bench-")))
    with duckdb.connect(str(settings.paths.warehouse)) as con:
        started = time.perf_counter()
        windows = build_attempts(con, settings.features, settings.weather.source)
        windows_done = time.perf_counter()
        build_history(con)
        features = attempt_features(
            con, con.table("attempts").pl(), settings.features.success_rate_prior_strength
        )
        sql_all = time.perf_counter() - started
        sql_windows = windows_done - started
        weather = con.sql("SELECT * FROM weather_daily WHERE source = 'archive'").df()
    weather["date"] = pd.to_datetime(weather["date"])

    keys, sql_values, _, _ = window_tensors(windows)
    started = time.perf_counter()
    pandas_values = np.stack(
        [pandas_window(weather, p, pd.Timestamp(d)) for p, d in keys.iter_rows()]
    )
    pandas_windows = time.perf_counter() - started

    sample = np.random.default_rng(0).choice(keys.height, min(args.sample, keys.height), False)
    np.testing.assert_allclose(
        sql_values[sample], pandas_values[sample], rtol=1e-9, atol=1e-9, equal_nan=True
    )
    print(f"{keys.height:,} windows, {features.height:,} attempts; {len(sample)} windows equal\n")
    print("| step | DuckDB SQL (s) | pandas loop, windows only (s) | pandas / SQL |")
    print("| --- | ---: | ---: | ---: |")
    print(
        f"| attempts + all weather windows | {sql_windows:.2f} | {pandas_windows:.2f} "
        f"| {pandas_windows / sql_windows:.1f}x |"
    )
    print(f"| attempts + windows + history + tabular features | {sql_all:.2f} | - | - |")


if __name__ == "__main__":
    main()
