"""A features snapshot handed to another machine through the MLflow tracking server, never a disk.

The data worker publishes the snapshot folder it built as the artifacts of one MLflow run per
snapshot (experiment `<mlflow.experiment>-features`, tagged with the files' sha256); a training
worker anywhere downloads it by URI with the pipeline's MLflow credentials and checks that digest
before it trains. Where the server proxies artifacts (`--serve-artifacts`), the files go through
it to its artifact store (a folder or an object store such as s3://): no worker needs a path or
credentials of the store.

Publishing is idempotent: a snapshot already uploaded whole (its run tagged complete) is found
by its digest and not sent again; an upload cut short leaves a run without that tag, never used.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from deepsummit.contracts.artifact import files_digest
from deepsummit.contracts.champion import download_folder, experiment_named
from deepsummit.core.errors import BadInput
from deepsummit.core.sections import MlflowConfig

logger = logging.getLogger(__name__)

ARTIFACT_DIR = "features"  # the snapshot's files under the run's artifacts
TAG_DIGEST = "deepsummit.snapshot_files_sha256"
TAG_COMPLETE = "deepsummit.snapshot_complete"


@dataclass(frozen=True)
class PublishedSnapshot:
    uri: str  # runs:/<run id>/features: what a training worker downloads
    digest: str  # sha256 of the snapshot's files (contracts/artifact.py files_digest)
    run_id: str
    upload_s: float  # 0 when it was already published


def features_experiment(config: MlflowConfig) -> str:
    return f"{config.experiment}-features"


def publish_snapshot(config: MlflowConfig, directory: Path) -> PublishedSnapshot:
    """Upload the snapshot folder `directory` (once per content) and say where it is."""
    from mlflow import MlflowClient

    folder = directory.resolve()  # the generation the snapshot's link names now
    digest = files_digest(folder)
    client = MlflowClient(config.tracking_uri)
    experiment_id = experiment_named(client, features_experiment(config))
    found = client.search_runs(
        [experiment_id],
        filter_string=f"tags.`{TAG_DIGEST}` = '{digest}' and tags.`{TAG_COMPLETE}` = 'true'",
        max_results=1,
    )
    if found:
        run_id = found[0].info.run_id
        return PublishedSnapshot(f"runs:/{run_id}/{ARTIFACT_DIR}", digest, run_id, 0.0)
    run = client.create_run(
        experiment_id, run_name=f"features-{digest[:12]}", tags={TAG_DIGEST: digest}
    )
    run_id = run.info.run_id
    started = time.monotonic()
    try:
        client.log_artifacts(run_id, str(folder), artifact_path=ARTIFACT_DIR)
    except BaseException:
        client.set_terminated(run_id, "FAILED")
        raise
    upload_s = time.monotonic() - started
    client.set_tag(run_id, TAG_COMPLETE, "true")
    client.set_terminated(run_id, "FINISHED")
    logger.info(
        "features snapshot %s published as runs:/%s/%s in %.1f s",
        digest[:12], run_id, ARTIFACT_DIR, upload_s,
    )  # fmt: skip
    return PublishedSnapshot(f"runs:/{run_id}/{ARTIFACT_DIR}", digest, run_id, upload_s)


def fetch_snapshot(config: MlflowConfig, uri: str, digest: str, cache_dir: Path) -> Path:
    """A local copy of the snapshot published at `uri`, whose files have sha256 `digest`:
    the one kept in `cache_dir` by an earlier call while it still has that digest, else a
    fresh download, checked before it is put in place. A download of other files is refused
    in one line naming the URI, and nothing of it is kept."""
    folder = cache_dir / digest[:12]
    if folder.is_dir() and files_digest(folder) == digest:
        return folder
    started = time.monotonic()
    download_folder(config.tracking_uri, uri, folder, lambda staged: _check(uri, digest, staged))
    logger.info("features snapshot %s fetched in %.1f s", uri, time.monotonic() - started)
    return folder


def _check(uri: str, digest: str, staged: Path) -> None:
    found = files_digest(staged)
    if found != digest:
        raise BadInput(
            f"features snapshot {uri}: its files' sha256 is {found[:12]}, the chain published "
            f"{digest[:12]}: refused, nothing trained"
        )
