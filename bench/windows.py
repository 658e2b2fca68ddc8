"""Wall time of the weather windows query (deepsummit/sql/features_weather_windows.sql) on the
bundle's archive weather: every (peak, date) with weather since 2005, about 58,000 windows, the
features build's largest query. Run it at two commits with farm-bench to compare them:

    farm-bench -n 5 --timeout 600 -- .venv/bin/python bench/windows.py \\
        --vs ".venv/bin/python /tmp/deepsummit-old/bench/windows.py"
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # this checkout's code

from _bundle import DEFAULT_BUNDLE, bundle_warehouse

from deepsummit.core.warehouse import frame_digest
from deepsummit.features.windows import compute_windows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE)
    args = parser.parse_args()
    warehouse = args.bundle / "warehouse.duckdb"
    if not warehouse.exists():
        bundle_warehouse(args.bundle)
    with duckdb.connect(str(warehouse), read_only=True) as con:
        targets = con.sql(
            "SELECT DISTINCT peakid, date FROM weather_daily "
            "WHERE source = 'archive' AND date >= DATE '2005-01-01'"
        ).pl()
        started = time.perf_counter()
        windows = compute_windows(con, targets, "archive")
        seconds = time.perf_counter() - started
    print(
        f"{targets.height:,} windows ({windows.height:,} token rows) in {seconds:.2f} s; "
        f"digest {frame_digest(windows)}"
    )


if __name__ == "__main__":
    main()
