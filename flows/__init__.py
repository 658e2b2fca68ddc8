"""Prefect flows and tasks: thin wrappers over `pipeline/`."""
