"""The model artifact, in one place: what a registered version holds, how it is written and read.

A version's folder (`model/` among its MLflow artifacts):

    model_config.json          ModelConfig of the network
    weights/seed-<seed>.pt     one state dict per training seed, the best (by validation AUC)
                               first in metadata.json; the others give the prediction band
    preprocessing.json         the Preprocessor fitted on the training split
    calibration.json           the Calibrator fitted on the member check's held-out members
    history/<table>.parquet    the history tables the features were computed from, as of the
                               records the model was trained with (deepsummit/features/tabular.py)
    drift_profile.json         the training split's input distributions: the reference newer
                               records and planned attempts are compared with
    metadata.json              seeds, weather source, inputs and when they are known, cutoffs
    blend/                     only where the version serves a blend of the transformer and the
                               best tree (deepsummit/contracts/blend.py): the tree and its weight

Tensors are written with `torch.save` and read with `torch.load(weights_only=True)`, which
refuses anything but tensors and plain containers. The pyfunc is logged "from code"
(`deepsummit/serve/model_code.py`): loading a version imports that file instead of unpickling a
Python object. `files_digest` is recorded on the version at registration
(deepsummit/train/registration.py) and checked before any version is loaded
(deepsummit/train/registry.py).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from deepsummit.contracts.blend import TRANSFORMER_PART, Blend
from deepsummit.contracts.calibration import Calibrator
from deepsummit.contracts.distribution import DistributionProfile
from deepsummit.contracts.preprocessing import Preprocessor
from deepsummit.contracts.tensors import load_tensors, save_tensors
from deepsummit.model.config import ModelConfig
from deepsummit.model.transformer import DeepSummitTransformer

ARTIFACT_NAME = "model"  # the pyfunc's artifact key and folder name
DRIFT_PROFILE = "drift_profile.json"
# How the member check judged each member group (deepsummit/train/member_groups.py writes it,
# `predict` names the asked member's groups from it); absent in versions from before it.
MEMBER_GROUPS = "member_groups.json"


# Written by MLflow into a downloaded registered version (its name and number), so it differs
# between downloads of the same files; everything else a version holds is hashed.
DOWNLOAD_METADATA = "registered_model_meta"


def files_digest(directory: Path) -> str:
    """sha256 over every file under `directory` (relative path and content), in path order."""
    digest = hashlib.sha256()
    files = (p for p in directory.rglob("*") if p.is_file() and p.name != DOWNLOAD_METADATA)
    for path in sorted(files):
        digest.update(str(path.relative_to(directory)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


@dataclass
class ModelArtifact:
    """A trained model and everything it needs to score a planned attempt."""

    networks: list[DeepSummitTransformer]  # one per seed: the answer is their mean logit
    seeds: list[int]
    preprocessor: Preprocessor
    calibrator: Calibrator
    history: dict[str, pl.DataFrame]
    drift_reference: DistributionProfile
    # GroupCalibration.as_json() of the member check, all peaks; None in older versions.
    member_groups: dict[str, Any] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    blend: Blend | None = None  # None: the transformer answers alone

    @property
    def config(self) -> ModelConfig:
        return self.networks[0].config

    @property
    def parts(self) -> str:
        """Which models answer: "transformer", or the blend's parts and weights."""
        return self.blend.parts if self.blend is not None else TRANSFORMER_PART

    def save(self, directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "model_config.json").write_text(json.dumps(asdict(self.config), indent=2))
        for seed, network in zip(self.seeds, self.networks, strict=True):
            save_tensors(directory / "weights" / f"seed-{seed}.pt", network.state_dict())
        self.preprocessor.save(directory / "preprocessing.json")
        (directory / "calibration.json").write_text(self.calibrator.to_json())
        (directory / "history").mkdir(exist_ok=True)
        for name, frame in self.history.items():
            frame.write_parquet(directory / "history" / f"{name}.parquet")
        (directory / DRIFT_PROFILE).write_text(self.drift_reference.to_json())
        if self.member_groups is not None:
            (directory / MEMBER_GROUPS).write_text(json.dumps(self.member_groups, indent=1))
        if self.blend is not None:
            self.blend.save(directory)
        metadata = {**self.metadata, "seeds": self.seeds}
        (directory / "metadata.json").write_text(json.dumps(metadata, indent=2, default=str))
        return directory

    @classmethod
    def load(cls, directory: Path) -> ModelArtifact:
        config = ModelConfig(**json.loads((directory / "model_config.json").read_text()))
        metadata = json.loads((directory / "metadata.json").read_text())
        networks = []
        for seed in metadata["seeds"]:
            network = DeepSummitTransformer(config)
            network.load_state_dict(load_tensors(directory / "weights" / f"seed-{seed}.pt"))
            networks.append(network.eval())
        return cls(
            networks=networks,
            seeds=list(metadata["seeds"]),
            preprocessor=Preprocessor.load(directory / "preprocessing.json"),
            calibrator=Calibrator.from_json((directory / "calibration.json").read_text()),
            history={
                p.stem: pl.read_parquet(p)
                for p in sorted((directory / "history").glob("*.parquet"))
            },
            drift_reference=DistributionProfile.from_json((directory / DRIFT_PROFILE).read_text()),
            member_groups=(
                json.loads((directory / MEMBER_GROUPS).read_text())
                if (directory / MEMBER_GROUPS).exists()
                else None
            ),
            metadata=metadata,
            blend=Blend.load(directory),
        )
