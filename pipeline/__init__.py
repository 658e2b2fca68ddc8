"""DeepSummit pipeline stages: plain functions over Polars frames, DuckDB tables and dataclasses.

Nothing in this package imports Prefect; `flows/` wraps these functions for orchestration.
"""
