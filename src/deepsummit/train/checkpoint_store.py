"""A training's checkpoint kept on the MLflow tracking server too, so that the training, rescheduled
on another worker (one sharing no disk with the first), resumes where the first left off.

Each training is one MLflow run in the experiment `<mlflow.experiment>-checkpoints`, found by its
key (`training_key`: the checkpoint signature and the digest of the rows it trains and is judged
on, so two trainings share a key only when they would learn the same weights). Its checkpoint
goes through the server (proxied artifacts, `mlflow-artifacts:/`: no worker needs a path into
the store) to one of two slots, `checkpoints/a/last.pt` and `checkpoints/b/last.pt`, taking turns;
the run's tag `deepsummit.checkpoint` then names the slot, its epoch and its sha256 in one
write. An upload cut short leaves the other slot, still named by the tag, whole; a download whose
sha256 differs from the tag's is never resumed.

The upload is a spare copy: a tracking server that does not answer, or fails, skips it with one
log line and the training goes on from its local checkpoint. MLflow and the HTTP client are
imported only where used: the trainer runs on a bare GPU machine without them when nothing is
uploaded.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TypeVar

from deepsummit.contracts.arrays import FeatureArrays
from deepsummit.contracts.training_lease import Lease
from deepsummit.core.sections import MlflowConfig
from deepsummit.train.checkpoint import CHECKPOINT_FILE

logger = logging.getLogger(__name__)

T = TypeVar("T")

ARTIFACT_DIR = "checkpoints"  # the slots' folder under the run's artifacts
SLOTS = ("a", "b")
TAG_KEY = "deepsummit.checkpoint_key"
TAG_SIGNATURE = "deepsummit.checkpoint_signature"
TAG_UPLOADED = "deepsummit.checkpoint"  # {"epoch", "slot", "sha256"} of the last whole upload
TAG_FOLDER = "deepsummit.checkpoint_folder"  # what `discard_uploads` finds it by


def checkpoints_experiment(config: MlflowConfig) -> str:
    return f"{config.experiment}-checkpoints"


def arrays_digest(arrays: FeatureArrays | None) -> str:
    """sha256 of every field of `arrays` (name, shape, dtype and values); "none" without rows."""
    if arrays is None:
        return "none"
    digest = hashlib.sha256()
    for field in fields(arrays):
        values = getattr(arrays, field.name)
        digest.update(f"{field.name}:{values.shape}:{values.dtype}".encode())
        digest.update(memoryview(values.ravel(order="C")).cast("B"))
    return digest.hexdigest()


def upload_folder(checkpoint_dir: Path, root: Path) -> str:
    """The local checkpoint folder's name as every worker with the same settings calls it: its
    path under `train.checkpoint_dir` (the train stage's `<key>/member-check/seed-42`), else
    its own name."""
    try:
        return checkpoint_dir.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return checkpoint_dir.name


def training_key(signature: str, train: FeatureArrays, validation: FeatureArrays | None) -> str:
    """What finds one training's upload: its checkpoint signature (architecture, knobs, seed,
    epochs) and the rows it trains on and is judged by."""
    document = f"{signature}:{arrays_digest(train)}:{arrays_digest(validation)}"
    return hashlib.sha256(document.encode()).hexdigest()[:24]


@dataclass(frozen=True)
class Upload:
    """What the tag of a training's run says of its last whole upload."""

    epoch: int
    slot: str
    sha256: str

    @property
    def path(self) -> str:
        # log_artifact keeps the local file's name
        return f"{ARTIFACT_DIR}/{self.slot}/{CHECKPOINT_FILE}"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _unless_failing(
    config: MlflowConfig, what: str, step: Callable[..., T], *args: object
) -> T | None:
    """`step`, or None with one line when the tracking server does not answer or the step
    fails: an upload is a spare copy, never a reason for a training (or a stage) to stop."""
    # Imported here: what asks the server needs more than a bare GPU machine has.
    from deepsummit.contracts.champion import registry_reachable
    from deepsummit.train.tracking import bound_requests

    uri = config.tracking_uri
    if not registry_reachable(uri):
        logger.warning("%s skipped: MLflow tracking server %s is not answering", what, uri)
        return None
    bound_requests(config)  # a server lost mid-upload: not MLflow's 4 minutes of retries
    try:
        return step(*args)
    except Exception as error:  # any failure of MLflow's client or of the server
        reason = next(iter(str(error).strip().splitlines()), "")[:160]
        logger.warning("%s skipped (%s: %s)", what, type(error).__name__, reason)
        return None


class UploadedCheckpoint:
    """One training's checkpoint on the tracking server of `config`: fetched once where no
    local one exists, uploaded after the epochs the trainer says."""

    def __init__(
        self,
        config: MlflowConfig,
        key: str,
        signature: str,
        folder: str,
        lease: Lease | None = None,
    ) -> None:
        self.config = config
        self.key = key
        self.signature = signature
        self.folder = folder  # the local checkpoint's folder (`upload_folder`)
        self.lease = lease  # held for every upload, where the training holds one
        self._run_id: str | None = None  # the training's run, once found or created

    def fetch(self, destination: Path) -> str | None:
        """The newest whole upload of this training, checked against its sha256, written to
        `destination`; its URI, or None (nothing uploaded, a server that does not answer, a
        download that differs from what was uploaded: each said in one line)."""
        return _unless_failing(
            self.config, "looking for an uploaded checkpoint", self._fetch, destination
        )

    def upload(self, checkpoint: Path, epoch: int) -> None:
        """`checkpoint` (the local file, just written for `epoch`) into the slot the tag does
        not name, then the tag: a reader sees the previous upload or this whole one. A
        training that no longer holds its lease stops here, in one line."""
        what = f"checkpoint upload of epoch {epoch}"
        if self.lease is not None:
            holder = _unless_failing(self.config, what, self.lease.holder_now, self.config)
            if holder is None:  # no server: nothing would be uploaded anyway (said)
                return
            self.lease.refuse_unless(holder, what)
        _unless_failing(self.config, what, self._upload, checkpoint, epoch)

    def _fetch(self, destination: Path) -> str | None:
        import mlflow

        client = mlflow.MlflowClient(self.config.tracking_uri)
        found = self._newest_upload(client)
        if found is None:
            return None
        run_id, upload = found
        self._run_id = run_id
        uri = f"runs:/{run_id}/{upload.path}"
        destination.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".uploaded-", dir=destination.parent))
        try:
            local = mlflow.artifacts.download_artifacts(
                run_id=run_id,
                artifact_path=upload.path,
                dst_path=str(staging),
                tracking_uri=self.config.tracking_uri,
            )
            found_sha256 = file_sha256(Path(local))
            if found_sha256 != upload.sha256:
                logger.warning(
                    "%s has sha256 %s, uploaded as %s: not resumed",
                    uri, found_sha256[:12], upload.sha256[:12],
                )  # fmt: skip
                return None
            os.replace(local, destination)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return uri

    def _newest_upload(self, client) -> tuple[str, Upload] | None:
        """(run id, upload) of the highest epoch uploaded whole under this key (two workers
        that once raced to create the run may have left two)."""
        experiment = client.get_experiment_by_name(checkpoints_experiment(self.config))
        if experiment is None:
            return None
        runs = client.search_runs(
            [experiment.experiment_id], filter_string=f"tags.`{TAG_KEY}` = '{self.key}'"
        )
        uploads = [
            (run.info.run_id, Upload(**json.loads(run.data.tags[TAG_UPLOADED])))
            for run in runs
            if TAG_UPLOADED in run.data.tags
        ]
        return max(uploads, key=lambda found: found[1].epoch, default=None)

    def _upload(self, checkpoint: Path, epoch: int) -> None:
        import mlflow

        started = time.perf_counter()
        client = mlflow.MlflowClient(self.config.tracking_uri)
        run_id = self._run_id or self._training_run(client)
        self._run_id = run_id
        previous = client.get_run(run_id).data.tags.get(TAG_UPLOADED)
        in_use = None if previous is None else json.loads(previous)["slot"]
        slot = SLOTS[1] if in_use == SLOTS[0] else SLOTS[0]
        upload = Upload(epoch, slot, file_sha256(checkpoint))
        client.log_artifact(run_id, str(checkpoint), artifact_path=f"{ARTIFACT_DIR}/{slot}")
        client.set_tag(run_id, TAG_UPLOADED, json.dumps(asdict(upload)))
        logger.info(
            "checkpoint of epoch %d uploaded to runs:/%s/%s (%.1f MB, %.1f s)",
            epoch, run_id, upload.path, checkpoint.stat().st_size / 1e6,
            time.perf_counter() - started,
        )  # fmt: skip

    def _training_run(self, client) -> str:
        """This key's run: the one uploaded to before, else a new one (and its experiment)."""
        from deepsummit.contracts.champion import experiment_named  # not on a bare GPU worker

        experiment_id = experiment_named(client, checkpoints_experiment(self.config))
        runs = client.search_runs(
            [experiment_id], filter_string=f"tags.`{TAG_KEY}` = '{self.key}'", max_results=1
        )
        if runs:
            return runs[0].info.run_id
        tags = {TAG_KEY: self.key, TAG_SIGNATURE: self.signature, TAG_FOLDER: self.folder}
        run = client.create_run(experiment_id, tags=tags, run_name=f"checkpoint-{self.key}")
        return run.info.run_id


def discard_uploads(config: MlflowConfig, folder: str) -> int:
    """Delete the uploaded checkpoints of the trainings whose local folder is `folder` or under
    it (their files, then their runs), once what they trained is safe elsewhere: the train stage
    calls it with its checkpoint folder's name after registering. How many were deleted; 0 with
    one line when the server does not answer (they stay until the next call)."""
    return _unless_failing(config, f"discarding the checkpoints uploaded under {folder}",
                           _discard, config, folder) or 0  # fmt: skip


def _discard(config: MlflowConfig, folder: str) -> int:
    import mlflow
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    client = mlflow.MlflowClient(config.tracking_uri)
    experiment = client.get_experiment_by_name(checkpoints_experiment(config))
    if experiment is None:
        return 0
    runs = [
        run
        for run in client.search_runs(
            [experiment.experiment_id], filter_string=f"tags.`{TAG_FOLDER}` LIKE '{folder}%'"
        )
        if run.data.tags[TAG_FOLDER] == folder or run.data.tags[TAG_FOLDER].startswith(f"{folder}/")
    ]
    for run in runs:
        artifacts = get_artifact_repository(run.info.artifact_uri, config.tracking_uri)
        artifacts.delete_artifacts(ARTIFACT_DIR)
        client.delete_run(run.info.run_id)
    return len(runs)
