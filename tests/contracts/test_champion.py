"""A registered version's verified copy: kept in the cache by registry, name and version, used
again without a download while its files have the registered digest, downloaded again when
they changed on disk, never used otherwise."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from training_fixtures import TrainedRegistry

from deepsummit.contracts import champion
from deepsummit.contracts.champion import (
    ARTIFACT_PATH,
    TAG_FILES_DIGEST,
    ModelFilesChanged,
    RegisteredVersion,
    champion_version,
    load_verified,
    verified_copy,
)
from deepsummit.core.errors import ServiceUnavailable

pytest_plugins = ["features_fixtures", "training_fixtures"]


def test_the_copy_is_kept_checked_and_mended(
    trained_registry: TrainedRegistry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = trained_registry.settings.mlflow
    uri, version = config.tracking_uri, champion_version(config)
    assert version.version == "1" and TAG_FILES_DIGEST in version.tags

    first = verified_copy(uri, version, tmp_path)
    assert first.is_relative_to(tmp_path) and (first / ARTIFACT_PATH / "metadata.json").exists()
    calibration = first / ARTIFACT_PATH / "calibration.json"
    registered = calibration.read_text()

    def no_download(*_: object) -> None:
        raise AssertionError("downloaded again")

    with monkeypatch.context() as patched:
        patched.setattr(champion, "download_folder", no_download)
        assert verified_copy(uri, version, tmp_path) == first  # the kept copy, not a download

    calibration.write_text(registered.replace('"method"', '"method" ', 1))  # changed on disk
    assert verified_copy(uri, version, tmp_path) == first
    assert calibration.read_text() == registered  # downloaded again: the registered files

    forged = RegisteredVersion(version.name, version.version, {TAG_FILES_DIGEST: "0" * 64})
    with pytest.raises(ModelFilesChanged, match="deepsummit v1: its files' sha256 is"):
        verified_copy(uri, forged, tmp_path / "other")
    assert not list((tmp_path / "other").rglob("*.pt"))  # nothing unverified is left


def test_a_version_loaded_without_a_cache_leaves_no_copy_behind(
    trained_registry: TrainedRegistry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gate and the outlook load a version without the cache: its temporary copy is gone
    once the model is loaded (a nightly run must not fill the disk with model copies)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    config = trained_registry.settings.mlflow
    model = load_verified(config.tracking_uri, config.registered_model, "1")
    assert model.unwrap_python_model().artifact.networks  # loaded, then the copy removed
    assert list(tmp_path.iterdir()) == []


def test_files_the_registry_cannot_hand_over_are_one_line_naming_the_version(
    tmp_path: Path,
) -> None:
    """A version whose files a tracking server serves (mlflow-artifacts:/), asked through the
    server's database instead: one line, not MLflow's page of advice, and nothing is left."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    run = client.create_run(client.create_experiment("served"))
    client.create_registered_model("deepsummit")
    client.create_model_version(
        "deepsummit", "mlflow-artifacts:/1/models/m/artifacts", run.info.run_id
    )
    version = RegisteredVersion("deepsummit", "1", {TAG_FILES_DIGEST: "0" * 64})
    with pytest.raises(ServiceUnavailable) as raised:
        verified_copy(uri, version, tmp_path / "cache")
    line = str(raised.value)
    assert "\n" not in line
    assert line.startswith(
        f"models:/deepsummit/1 cannot be downloaded through {uri}: When an mlflow-artifacts URI "
        "was supplied, the tracking URI must be a valid http or https URI"
    )
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]


def test_a_sqlite_stores_experiment_keeps_its_files_beside_the_database(tmp_path: Path) -> None:
    """Not in ./mlruns of the folder the process runs in (the checkout, for a command or a flow
    run), MLflow's default."""
    import mlflow

    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    (tmp_path / "store").mkdir()
    experiment_id = champion.set_experiment(uri, "deepsummit")
    with mlflow.start_run(experiment_id=experiment_id):
        mlflow.log_text("logged", "note.txt")
    assert (tmp_path / "store/mlartifacts/deepsummit").is_dir()
    assert [p.name for p in (tmp_path / "store").rglob("note.txt")] == ["note.txt"]
    assert champion.set_experiment(uri, "deepsummit") == experiment_id  # found, not made again
