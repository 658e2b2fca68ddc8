"""The local services `deepsummit up` runs (Prefect server, MLflow server, a worker), the
Prefect REST helpers they need, and the failed-run alerts."""
