"""A features snapshot travels to a training worker through a real MLflow server: published once
per content, fetched by URI into a cache of the worker's own, and refused in one line when the
files that come back are not the ones published."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow import MlflowClient
from services_fixtures import mlflow_server_settings, start_mlflow

from deepsummit.contracts.artifact import files_digest
from deepsummit.core.config import Settings
from deepsummit.core.errors import BadInput
from deepsummit.services import supervisor as services
from deepsummit.services.local import mlflow_store
from deepsummit.train.snapshot_store import (
    TAG_DIGEST,
    features_experiment,
    fetch_snapshot,
    publish_snapshot,
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """A real MLflow server (the `deepsummit up` one) on a free port, its files in a folder."""
    settings = mlflow_server_settings(tmp_path_factory.mktemp("server"))
    start_mlflow(settings)
    yield settings
    services.down(settings)


def a_snapshot(folder: Path, content: str) -> Path:
    """A folder laid out like a snapshot: files at the top and in a sub-folder."""
    (folder / "history").mkdir(parents=True)
    (folder / "preprocessing.json").write_text(f'{{"content": "{content}"}}')
    (folder / "train.npz").write_bytes(bytes(range(256)) * 64)
    (folder / "history" / "members.parquet").write_bytes(content.encode() * 100)
    return folder


def stored_copy(server: Settings, run_id: str) -> Path:
    """The server's own copy of a published snapshot, in its artifact folder."""
    _, artifacts = mlflow_store(server)
    [folder] = artifacts.glob(f"*/{run_id}/artifacts/features")
    return folder


def test_a_snapshot_published_on_one_worker_is_fetched_whole_on_another(
    server: Settings, tmp_path: Path
) -> None:
    built = a_snapshot(tmp_path / "data-worker" / "abc", "spring 2025")
    published = publish_snapshot(server.mlflow, built)

    fetched = fetch_snapshot(
        server.mlflow, published.uri, published.digest, tmp_path / "training-worker"
    )

    assert fetched.parent == tmp_path / "training-worker"
    assert files_digest(fetched) == files_digest(built) == published.digest
    assert (fetched / "history" / "members.parquet").read_bytes() == (
        built / "history" / "members.parquet"
    ).read_bytes()
    # The same files again: found by their digest, not uploaded twice.
    again = publish_snapshot(server.mlflow, built)
    assert (again.run_id, again.upload_s) == (published.run_id, 0.0)


def test_an_upload_cut_short_is_never_the_published_snapshot(
    server: Settings, tmp_path: Path
) -> None:
    built = a_snapshot(tmp_path / "abc", "autumn 2024")
    client = MlflowClient(server.mlflow.tracking_uri)
    experiment = client.get_experiment_by_name(features_experiment(server.mlflow))
    experiment_id = (
        experiment.experiment_id
        if experiment
        else client.create_experiment(features_experiment(server.mlflow))
    )
    # What a publisher killed mid-upload leaves: the run and part of the files, no completion.
    cut_short = client.create_run(experiment_id, tags={TAG_DIGEST: files_digest(built)})
    client.log_artifact(cut_short.info.run_id, str(built / "preprocessing.json"), "features")

    published = publish_snapshot(server.mlflow, built)

    assert published.run_id != cut_short.info.run_id
    fetched = fetch_snapshot(server.mlflow, published.uri, published.digest, tmp_path / "cache")
    assert files_digest(fetched) == published.digest


def test_a_snapshot_changed_in_the_store_is_refused_in_one_line_naming_its_uri(
    server: Settings, tmp_path: Path
) -> None:
    published = publish_snapshot(server.mlflow, a_snapshot(tmp_path / "abc", "spring 2024"))
    stored = stored_copy(server, published.run_id) / "preprocessing.json"
    stored.write_text(stored.read_text().replace("2024", "2023"))
    cache = tmp_path / "training-worker"

    with pytest.raises(BadInput) as refused:
        fetch_snapshot(server.mlflow, published.uri, published.digest, cache)

    message = str(refused.value)
    assert "\n" not in message
    assert published.uri in message and "refused" in message
    assert not any(cache.rglob("*.json")), "nothing of the refused download is kept"


def test_a_cached_copy_changed_on_the_worker_is_fetched_again(
    server: Settings, tmp_path: Path
) -> None:
    published = publish_snapshot(server.mlflow, a_snapshot(tmp_path / "abc", "spring 2023"))
    cache = tmp_path / "training-worker"
    fetched = fetch_snapshot(server.mlflow, published.uri, published.digest, cache)
    (fetched / "train.npz").write_bytes(b"truncated")

    again = fetch_snapshot(server.mlflow, published.uri, published.digest, cache)

    assert again == fetched and files_digest(again) == published.digest
