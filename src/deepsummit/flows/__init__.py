"""Prefect flows and tasks: thin wrappers that run the stages of `deepsummit.flows.stages`."""
