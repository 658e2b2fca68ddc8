"""What the backtest needs of a fold's trained transformer: its answers, not its weights.

A fold trains in one place and is scored in another only through this record, so the spec's
base profile can train its folds on a GPU machine that has PyTorch and NumPy alone
(bench/gpu.py) while the calibration, the baselines and the season tables run here, through
the same code as a fold trained here (deepsummit/backtest/run.py). Nothing in it needs Polars.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import torch

from deepsummit.contracts.arrays import FeatureArrays, ensemble_probability, member_logits
from deepsummit.train.trainer import TrainResult


@dataclass(frozen=True)
class FoldAnswers:
    validation: np.ndarray  # (N_validation,) the judged networks' P: the calibration map's rows
    test: np.ndarray  # (M, N_test) logits of every member of the answering networks
    push_days: np.ndarray  # (M, N_days) the same on the test year's push-day candidates
    push_days_without_weather: np.ndarray  # (M, N_days) those with every weather value masked
    epochs: np.ndarray  # (trainings, 2): best epoch and epochs run of each judged training

    @classmethod
    def of(
        cls,
        judged: Sequence[TrainResult],
        answering: Sequence[TrainResult],
        validation: FeatureArrays,
        test: FeatureArrays,
        push_days: FeatureArrays,
        device: torch.device | None = None,
    ) -> FoldAnswers:
        """`judged`: the trainings validated on the fold's validation years; `answering`: the
        networks that answer its test year (the same, or their refit on every season)."""

        def logits(results: Sequence[TrainResult], rows: FeatureArrays) -> np.ndarray:
            return member_logits([r.model for r in results], rows.model_inputs(), device=device)

        return cls(
            validation=ensemble_probability(logits(judged, validation)),
            test=logits(answering, test),
            push_days=logits(answering, push_days),
            push_days_without_weather=logits(answering, push_days.without_weather()),
            epochs=np.array([[r.best_epoch, len(r.history)] for r in judged], np.int64),
        )

    def save(self, path: Path) -> None:
        np.savez(path, **{f.name: getattr(self, f.name) for f in fields(self)})

    @classmethod
    def load(cls, path: Path) -> FoldAnswers:
        with np.load(path, allow_pickle=False) as archive:
            return cls(**{f.name: archive[f.name] for f in fields(cls)})
