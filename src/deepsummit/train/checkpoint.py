"""What a training keeps from epoch to epoch, and the checkpoint it resumes from.

The checkpoint (`last.pt` in the training's folder, rewritten atomically every epoch) holds the
model, its moving average, the optimiser, the schedule, the loss scaler and the torch RNG, beside
the progress below; its `signature` ties it to one configuration, so a checkpoint of another is
ignored rather than resumed.
"""

from __future__ import annotations

import logging
import math
import pickle
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from torch import nn

from deepsummit.contracts.tensors import load_tensors, save_tensors
from deepsummit.core.errors import disk_space_for

logger = logging.getLogger(__name__)

CHECKPOINT_FILE = "last.pt"


@dataclass(frozen=True)
class EpochRecord:
    epoch: int  # 1-based
    train_loss: float
    val_loss: float
    val_auc: float
    learning_rate: float  # at the end of the epoch
    seconds: float


@dataclass
class TrainingState:
    """What survives a crash besides the model, optimizer and scheduler: progress and the best
    epoch."""

    signature: str  # checkpoint_signature: a checkpoint of another configuration is ignored
    epoch: int = 0
    best_epoch: int = 0
    best_val_auc: float = -math.inf
    bad_epochs: int = 0
    best_state: dict[str, torch.Tensor] | None = None
    history: list[EpochRecord] | None = None

    def advance(self, record: EpochRecord, model: nn.Module, keep_last: bool) -> None:
        """Count the epoch; keep `model`'s weights when they are the best so far (or, with
        `keep_last`, always: best_epoch is then the last)."""
        self.epoch = record.epoch
        self.history = [*(self.history or []), record]
        if keep_last or record.val_auc > self.best_val_auc:
            self.best_val_auc, self.best_epoch, self.bad_epochs = record.val_auc, record.epoch, 0
            self.best_state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        else:
            self.bad_epochs += 1

    def checkpoint(
        self, model, averaged, optimizer, scheduler, scaler, device: torch.device
    ) -> dict:
        return {
            "signature": self.signature,
            "epoch": self.epoch,
            "best_epoch": self.best_epoch,
            "best_val_auc": self.best_val_auc,
            "bad_epochs": self.bad_epochs,
            "best_state": self.best_state,
            "history": [asdict(record) for record in self.history or []],
            "model": model.state_dict(),
            "averaged": None if averaged is None else averaged.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "scaler": scaler.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
        }


def save_checkpoint(path: Path, checkpoint: dict) -> None:
    """Replace the checkpoint at `path` atomically: on a full disk the previous one is kept and
    the run stops with one line (DiskFull) instead of torch's writer error."""
    with disk_space_for("the training checkpoint", path):
        save_tensors(path, checkpoint)


# What torch.load raises on a file cut short or damaged (empty, truncated zip, flipped bytes,
# not a torch file at all).
UNREADABLE_CHECKPOINT = (EOFError, OSError, RuntimeError, ValueError, pickle.UnpicklingError)


def resume(
    checkpoint: Path,
    fresh: TrainingState,
    model,
    averaged,
    optimizer,
    scheduler,
    scaler,
    origin: str | None = None,
) -> TrainingState:
    """`fresh` with the progress of `checkpoint`, and the training parts loaded from it; `fresh`
    itself when the file is unreadable or of another configuration. `origin`: where the file
    came from, when not from this disk (the URI of an upload), for the log line."""
    try:
        saved = load_tensors(checkpoint)
    except UNREADABLE_CHECKPOINT as error:
        # Losing the epochs done so far costs less than a run that cannot start; the file is
        # replaced by the first new checkpoint.
        first_line = next(iter(str(error).strip().splitlines()), "")[:120]
        reason = f"{type(error).__name__}: {first_line}" if first_line else type(error).__name__
        logger.warning("%s is unreadable (%s); training from scratch", checkpoint, reason)
        return fresh
    if not isinstance(saved, dict) or saved.get("signature") != fresh.signature:
        logger.warning("%s belongs to another configuration; training from scratch", checkpoint)
        return fresh
    model.load_state_dict(saved["model"])
    if averaged is not None:
        averaged.load_state_dict(saved["averaged"])
    optimizer.load_state_dict(saved["optimizer"])
    scheduler.load_state_dict(saved["scheduler"])
    scaler.load_state_dict(saved["scaler"])
    torch.set_rng_state(saved["torch_rng"])
    if saved["cuda_rng"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state(saved["cuda_rng"])
    logger.info("resuming from %s after epoch %d", origin or checkpoint, saved["epoch"])
    return replace(
        fresh,
        epoch=saved["epoch"],
        best_epoch=saved["best_epoch"],
        best_val_auc=saved["best_val_auc"],
        bad_epochs=saved["bad_epochs"],
        best_state=saved["best_state"],
        history=[EpochRecord(**record) for record in saved["history"]],
    )
