"""What a training flow run on another machine hands back to the chain that started it: a JSON
document checked against the schema below, never pickled objects (a pickle is code the reader
runs, and whoever can write the Prefect artifact that names the file can choose it).

Both sides also check that they are the same build: the chain passes its package version and
model spec (a digest of the settings that decide what is trained) to the training flow run,
which refuses to train under others, and the report carries the training's own, which the chain
refuses when they differ from its own. Each refusal is one line (a PipelineError).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
from dataclasses import asdict, dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from deepsummit.core.config import Settings
from deepsummit.core.errors import PipelineError

# The settings a training may differ in between two machines without training another model.
MACHINE_SETTINGS = frozenset({"device", "num_threads", "cpu_fallback"})


@dataclass(frozen=True)
class LineageRow:
    stage: str
    asset_key: str
    rows: int | None
    digest: str
    state: str  # Completed or Cached: whether this run computed the stage or reused it
    links: str = ""


@dataclass(frozen=True)
class Build:
    """What both sides of a hand-over must share."""

    package_version: str
    model_spec: str

    @classmethod
    def of(cls, settings: Settings) -> Build:
        """This process's build for a run under `settings`."""
        return cls(importlib.metadata.version("deepsummit"), model_spec(settings))

    def refuse_other(self, other: Build, what: str) -> None:
        """Raise, in one line, where `other` (what `what` runs) is not this build."""
        for field, mine, theirs in (
            ("package version", self.package_version, other.package_version),
            ("model spec", self.model_spec, other.model_spec),
        ):
            if mine != theirs:
                raise PipelineError(
                    f"train: {what} runs deepsummit {field} {theirs!r}, this side {mine!r}: "
                    "refused (install the same version and settings on both workers)"
                )


def model_spec(settings: Settings) -> str:
    """A digest of the architecture and the training settings that decide what is learnt:
    not where files go, how long a run waits, or which device it runs on."""
    train = settings.train.result_settings()
    document = {
        "model": asdict(settings.model),
        "train": {k: v for k, v in train.items() if k not in MACHINE_SETTINGS},
    }
    encoded = json.dumps(document, sort_keys=True, default=str).encode()
    return hashlib.sha256(encoded).hexdigest()[:16]


class TrainingReport(BaseModel):
    """The train stage's outcome as the chain shows it: the figures and rendered tables of its
    summary artifact, the registered version and the lineage rows of the training."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    schema_version: Literal[1] = 1
    package_version: str
    model_spec: str
    mlflow_run_id: str
    model_name: str
    model_version: str
    champion: bool
    decision_reason: str
    weather_source: str
    digest: str  # the features table's content digest
    inputs: tuple[str, ...]
    test_auc: float  # the served model's (the first of the comparison)
    served: str  # the models the registered version answers with, and their weights
    judged_line: str
    tables_markdown: str  # the comparison, the expeditions and the member groups, rendered
    run_url: str
    model_url: str
    lineage: tuple[LineageRow, ...]

    @property
    def build(self) -> Build:
        return Build(self.package_version, self.model_spec)

    def to_json(self) -> bytes:
        return self.model_dump_json().encode()

    @classmethod
    def from_json(cls, payload: bytes, where: str) -> TrainingReport:
        """The report in `payload` (read from `where`), refused in one line when it does not
        follow the schema."""
        try:
            return cls.model_validate_json(payload)
        except ValidationError as error:
            first = error.errors()[0]
            place = ".".join(map(str, first["loc"])) or "the document"
            raise PipelineError(
                f"train: the report at {where} does not follow the schema ({error.error_count()} "
                f"error(s); {place}: {first['msg']}): refused"
            ) from None
