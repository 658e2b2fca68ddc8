"""The `deepsummit` command line."""
