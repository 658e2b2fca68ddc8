"""The production registry's pipeline login (deployments/docker-compose.yml, `mlflow-users`):
created by the admin once, left as it is afterwards. It imports MLflow only, so that the
compose job runs it in the MLflow server's image:

    MLFLOW_TRACKING_URI=… MLFLOW_TRACKING_USERNAME=<admin> MLFLOW_TRACKING_PASSWORD=… \\
    MLFLOW_PIPELINE_USERNAME=… MLFLOW_PIPELINE_PASSWORD=… python mlflow_users.py
"""

from __future__ import annotations

import os

from mlflow.exceptions import RestException
from mlflow.server.auth.client import AuthServiceClient


def ensure_user(tracking_uri: str, username: str, password: str) -> bool:
    """Create `username` with the admin credentials of the environment (MLflow's own
    MLFLOW_TRACKING_USERNAME / _PASSWORD); True if it was created, False if it existed."""
    client = AuthServiceClient(tracking_uri)
    try:
        client.get_user(username)
        return False
    except RestException as error:
        if error.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
    client.create_user(username, password)
    return True


if __name__ == "__main__":
    name = os.environ["MLFLOW_PIPELINE_USERNAME"]
    created = ensure_user(
        os.environ["MLFLOW_TRACKING_URI"], name, os.environ["MLFLOW_PIPELINE_PASSWORD"]
    )
    print(f"MLflow user {name!r}: {'created' if created else 'exists'}")
