"""The lease a training flow run must hold to upload its checkpoint and register its model.

The chain publishes its features snapshot as an MLflow run, and names on a tag of that run the
training flow run it waits for, each time it starts one. A training whose worker the chain took
for lost (its heartbeats stopped: a network cut, not always a dead machine) may still be
running; once the chain has started the next one and named it, the lost one's next upload or
registration finds another holder and stops in one line, so it can neither overwrite the
checkpoint the next one resumes from nor register a second version.
"""

from __future__ import annotations

from dataclasses import dataclass

from deepsummit.core.errors import PipelineError
from deepsummit.core.sections import MlflowConfig

LEASE_TAG = "deepsummit.training_lease"


@dataclass(frozen=True)
class Lease:
    run_id: str  # the MLflow run whose tag names the holder: the chain's snapshot run
    holder: str  # the training flow run's id

    @classmethod
    def parse(cls, value: str | None) -> Lease | None:
        """The lease `train.lease` names (`<MLflow run id>/<flow run id>`); None for none."""
        if not value:
            return None
        run_id, _, holder = value.partition("/")
        return cls(run_id, holder)

    def __str__(self) -> str:
        return f"{self.run_id}/{self.holder}"

    def grant(self, config: MlflowConfig) -> None:
        """Name this lease's holder as the one training that may upload and register."""
        from mlflow import MlflowClient

        MlflowClient(config.tracking_uri).set_tag(self.run_id, LEASE_TAG, self.holder)

    def holder_now(self, config: MlflowConfig) -> str:
        """Whom the tracking server names now ("" for nobody)."""
        from mlflow import MlflowClient

        run = MlflowClient(config.tracking_uri).get_run(self.run_id)
        return run.data.tags.get(LEASE_TAG, "")

    def refuse_unless(self, holder_now: str, doing: str) -> None:
        """Raise, in one line, where `holder_now` is not this lease's holder."""
        if holder_now != self.holder:
            raise PipelineError(
                f"train: {doing} refused: flow run {holder_now or '(none)'} holds the training "
                f"lease, not this flow run {self.holder} (taken for lost and started again)"
            )

    def check(self, config: MlflowConfig, doing: str) -> None:
        """Raise, in one line, unless this lease is held now."""
        self.refuse_unless(self.holder_now(config), doing)
