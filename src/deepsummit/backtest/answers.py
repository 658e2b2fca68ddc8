"""What the backtest needs of a fold's trained transformer: its answers, not its weights.

A fold trains in one place and is scored in another only through this record, so the spec's
base profile can train its folds on a GPU machine that has PyTorch and NumPy alone
(bench/gpu.py) while the map, the baselines and the season tables run here, through the same
code as a fold trained here (deepsummit/backtest/run.py). Nothing in it needs Polars.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import torch

from deepsummit.contracts.arrays import FeatureArrays
from deepsummit.serve.inference import member_logits
from deepsummit.train.trainer import TrainingSummary, TrainResult


@dataclass(frozen=True)
class FoldAnswers:
    check: np.ndarray  # (M, N_check) the member check's networks' logits on its member rows
    check_trainings: np.ndarray  # (trainings, 4): TrainingSummary.to_array of the check's
    test: np.ndarray  # (M, N_test) logits of every member of the networks that answer
    push_days: np.ndarray  # (M, N_days) the same on the test year's push-day candidates
    push_days_without_weather: np.ndarray  # (M, N_days) those with every weather value masked

    @classmethod
    def of(
        cls,
        check_logits: np.ndarray,
        check_trainings: Sequence[TrainingSummary],
        answering: Sequence[TrainResult],
        test: FeatureArrays,
        push_days: FeatureArrays,
        device: torch.device | None = None,
    ) -> FoldAnswers:
        """`check_logits` and `check_trainings`: the member check's answers on its member rows
        and its trainings; `answering`: the recipe trained on every season before the test
        year."""

        def logits(rows: FeatureArrays) -> np.ndarray:
            return member_logits([r.model for r in answering], rows.model_inputs(), device=device)

        return cls(
            check=check_logits,
            check_trainings=TrainingSummary.to_array(check_trainings),
            test=logits(test),
            push_days=logits(push_days),
            push_days_without_weather=logits(push_days.without_weather()),
        )

    def trainings(self) -> tuple[TrainingSummary, ...]:
        return TrainingSummary.from_array(self.check_trainings)

    def save(self, path: Path) -> None:
        np.savez(path, **{f.name: getattr(self, f.name) for f in fields(self)})

    @classmethod
    def load(cls, path: Path) -> FoldAnswers:
        with np.load(path, allow_pickle=False) as archive:
            return cls(**{f.name: archive[f.name] for f in fields(cls)})
