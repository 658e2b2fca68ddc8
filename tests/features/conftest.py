"""Fixtures of the features tests beside those of tests/features_fixtures.py."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

# Two peaks of the bundle: a build of a few seconds, every kind of record and exclusion kept.
TWO_PEAKS = """
DELETE FROM expeditions WHERE peakid NOT IN ('LHOT', 'MAKA');
DELETE FROM members WHERE peakid NOT IN ('LHOT', 'MAKA');
DELETE FROM expedition_details WHERE peakid NOT IN ('LHOT', 'MAKA');
DELETE FROM weather_daily WHERE peakid NOT IN ('LHOT', 'MAKA');
DELETE FROM peaks WHERE peakid NOT IN ('LHOT', 'MAKA');
"""


@pytest.fixture
def two_peaks(bundle_copy: Path) -> Path:
    """A warehouse with the bundle's records and weather of two peaks (Lhotse, Makalu)."""
    with duckdb.connect(str(bundle_copy)) as con:
        con.execute(TWO_PEAKS)
    return bundle_copy
