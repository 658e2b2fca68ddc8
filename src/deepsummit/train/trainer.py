"""The trainer of the model spec (Part 7.3), resumable from a checkpoint written every epoch.

AdamW (β from settings, weight decay only on the weights of linear maps), cosine decay after a
linear warmup over the total number of steps, BCE on logits (each ensemble member's, averaged
over the members and weighted by each row's weight), gradient clipping, early stopping on the
ensemble's validation AUC. Mixed precision only on CUDA, so the CPU path is exact and a run resumed
from a checkpoint ends with the same weights, bit for bit, as one that was never interrupted:
the loader's shuffle is seeded per epoch and the global torch RNG (dropout, DropPath) is saved
with every checkpoint.

Checkpoints and weights are plain tensors written with `torch.save` and read back with
`torch.load(weights_only=True)`, which refuses to unpickle anything but tensors and containers.
Given an MLflow tracking server (`upload_to`), the checkpoint also goes there every
`train.checkpoint_upload_every` epochs and after the last: a training rescheduled on a worker
without the local file resumes from that upload (deepsummit/train/checkpoint_store.py).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.metrics import roc_auc_score
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from deepsummit.contracts.arrays import FeatureArrays
from deepsummit.contracts.training_lease import Lease
from deepsummit.core.errors import PipelineError
from deepsummit.core.sections import MlflowConfig, TrainConfig
from deepsummit.model.config import ModelConfig
from deepsummit.model.ensemble import EnsembleLinear
from deepsummit.model.tokenizer import quantile_bin_edges
from deepsummit.model.transformer import DeepSummitTransformer
from deepsummit.serve.inference import autocast_for, predict_proba
from deepsummit.train.batches import batches
from deepsummit.train.checkpoint import (
    CHECKPOINT_FILE,
    EpochRecord,
    TrainingState,
    resume,
    save_checkpoint,
)
from deepsummit.train.checkpoint_store import UploadedCheckpoint, training_key, upload_folder

logger = logging.getLogger(__name__)

# Per-feature tokenizers and the missing-value projection are embeddings in the FT-Transformer
# sense: decaying them pulls rare features/values toward zero, so they are left undecayed.
NO_DECAY_MODULES = ("tabular_tokenizer", "missing_proj")


@dataclass(frozen=True)
class TrainResult:
    model: DeepSummitTransformer  # in eval mode, holding the best epoch's weights, on CPU
    config: ModelConfig
    seed: int
    history: tuple[EpochRecord, ...]
    best_epoch: int
    best_val_auc: float
    stopped_early: bool
    resumed_from_epoch: int  # 0 for a fresh run
    train_rows: int
    device: str
    seconds: float  # wall time of this call (a resumed run counts only its own epochs)


@dataclass(frozen=True)
class TrainingSummary:
    """What is kept of a training once its weights are gone (a fold's answers, a check's)."""

    seed: int
    best_epoch: int
    epochs_run: int
    best_val_auc: float  # on its validation rows; NaN without any

    @classmethod
    def of(cls, result: TrainResult) -> TrainingSummary:
        return cls(result.seed, result.best_epoch, len(result.history), result.best_val_auc)

    @staticmethod
    def to_array(summaries: Sequence[TrainingSummary]) -> np.ndarray:
        """(trainings, 4): seed, best epoch, epochs run, validation AUC; as files keep them."""
        return np.array(
            [[s.seed, s.best_epoch, s.epochs_run, s.best_val_auc] for s in summaries], np.float64
        )

    @classmethod
    def from_array(cls, rows: np.ndarray) -> tuple[TrainingSummary, ...]:
        return tuple(
            cls(int(seed), int(best), int(run), float(auc)) for seed, best, run, auc in rows
        )


EpochCallback = Callable[[EpochRecord], None]


def resolve_device(train_config: TrainConfig) -> torch.device:
    """The device `train.device` names here. "auto" without CUDA is refused unless
    `train.cpu_fallback` allows the CPU: a GPU profile on a CPU trains for hours, not minutes."""
    requested = train_config.device
    if requested == "cuda" and not torch.cuda.is_available():
        raise PipelineError("train.device = cuda, but no CUDA device is available")
    if requested != "auto" or torch.cuda.is_available():
        return torch.device(requested if requested != "auto" else "cuda")
    if not train_config.cpu_fallback:
        raise PipelineError(
            "train.device = auto found no CUDA device on this machine; set "
            "train.cpu_fallback = true to train on its CPU (many times slower)"
        )
    _warn_cpu_fallback()
    return torch.device("cpu")


@functools.cache
def _warn_cpu_fallback() -> None:
    """Once a process: a stage trains several times, one line says it."""
    logger.warning("train: no CUDA device; training on the CPU (train.cpu_fallback = true)")


def training_slice(arrays: FeatureArrays, max_rows: int | None, seed: int) -> FeatureArrays:
    """At most `max_rows` rows, the same ones on every call: a seeded sample kept in order."""
    if max_rows is None or max_rows >= len(arrays):
        return arrays
    rows = np.sort(np.random.default_rng(seed).choice(len(arrays), size=max_rows, replace=False))
    return arrays.subset(rows)


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Decay only the (shared) weights of linear maps; norms, biases, embeddings and the
    ensemble members' adapters get none."""
    decayed: set[int] = set()
    for name, module in model.named_modules():
        linear = isinstance(module, nn.Linear | EnsembleLinear)
        if linear and not any(part in name for part in NO_DECAY_MODULES):
            decayed.add(id(module.weight))
    parameters = [p for p in model.parameters() if p.requires_grad]
    return [
        {"params": [p for p in parameters if id(p) in decayed], "weight_decay": weight_decay},
        {"params": [p for p in parameters if id(p) not in decayed], "weight_decay": 0.0},
    ]


def warmup_cosine(total_steps: int, warmup_fraction: float) -> Callable[[int], float]:
    """LR multiplier: linear from 1/warmup to 1 over the warmup steps, then cosine to 0."""
    warmup = max(1, math.ceil(warmup_fraction * total_steps))

    def multiplier(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total_steps - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return multiplier


def training_knobs(train_config: TrainConfig) -> dict[str, Any]:
    """The settings that change what training learns: not where files go, nor the device or
    threads it runs on, nor the map fitted after it."""
    return train_config.model_dump(
        mode="json",
        exclude={*TrainConfig.OPERATIONAL, *TrainConfig.CALIBRATION, "device", "num_threads"},
    )


def checkpoint_signature(
    config: ModelConfig, train_config: TrainConfig, train_rows: int, epochs: int | None = None
) -> str:
    """What a checkpoint must match to be resumed: architecture, training knobs, data size and
    the epochs to run (None: the whole schedule)."""
    document = json.dumps(
        {
            "model": asdict(config),
            "train": training_knobs(train_config),
            "rows": train_rows,
            "epochs": epochs,
        },
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(document.encode()).hexdigest()[:16]


def numeric_bins(architecture: ModelConfig, train: FeatureArrays) -> dict[str, Any]:
    """The bin edges piecewise-linear numeric embeddings read, from the training rows; none for
    the spec's linear ones."""
    if architecture.numeric_embedding != "piecewise":
        return {"numeric_bin_edges": ()}
    values, missing = torch.from_numpy(train.numeric), torch.from_numpy(train.numeric_missing)
    return {"numeric_bin_edges": quantile_bin_edges(values, missing, architecture.numeric_bins)}


def weighted_loss(
    logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    """BCE of every member's logits (B, k) against the labels (B,), averaged over the members
    (each member learns on its own, as in TabM) and over the rows by their weights (B,)."""
    targets = labels.unsqueeze(1).expand_as(logits)
    per_row = F.binary_cross_entropy_with_logits(logits, targets, reduction="none").mean(dim=1)
    return (per_row * weights).sum() / weights.sum()


def _judge(
    model: nn.Module, validation: FeatureArrays | None, batch_size: int, device: torch.device
) -> tuple[float, float]:
    """(loss, AUC) of the ensemble's answer on the validation rows; NaN without any."""
    if validation is None:
        return math.nan, math.nan
    p = np.clip(predict_proba(model, validation, batch_size, str(device)), 1e-7, 1 - 1e-7)
    labels = validation.label
    loss = float(-np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p)))
    return loss, float(roc_auc_score(labels, p))


@dataclass
class _Parts:
    """What one training updates: the network, its moving average, the optimiser, the learning
    rate schedule and the loss scaler, on one device."""

    model: DeepSummitTransformer
    averaged: AveragedModel | None
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler
    device: torch.device

    @property
    def judged(self) -> nn.Module:
        """The weights each epoch is judged and kept by: the model's, or their moving average."""
        return self.model if self.averaged is None else self.averaged.module

    def checkpointed(self) -> tuple:
        return self.model, self.averaged, self.optimizer, self.scheduler, self.scaler


def _parts(
    config: ModelConfig, train_config: TrainConfig, train_rows: int, device: torch.device
) -> _Parts:
    """A fresh network (seeded) and what trains it: AdamW over the parameter groups, warmup then
    cosine over the whole schedule's steps, loss scaling for fp16 only."""
    torch.manual_seed(train_config.seed)
    np.random.seed(train_config.seed)
    model = DeepSummitTransformer(config).to(device)
    averaged = (
        AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(train_config.ema_decay))
        if train_config.ema_decay
        else None
    )
    optimizer = torch.optim.AdamW(
        parameter_groups(model, train_config.weight_decay),
        lr=train_config.learning_rate,
        betas=train_config.betas,
    )
    steps_per_epoch = math.ceil(train_rows / train_config.batch_size)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        warmup_cosine(train_config.max_epochs * steps_per_epoch, train_config.warmup_fraction),
    )
    # fp16 needs loss scaling; bf16 (and CPU) does not.
    scaler = torch.amp.GradScaler(
        "cuda", enabled=device.type == "cuda" and not torch.cuda.is_bf16_supported()
    )
    return _Parts(model, averaged, optimizer, scheduler, scaler, device)


def _train_epoch(parts: _Parts, train: FeatureArrays, config: TrainConfig, epoch: int) -> float:
    """One pass over `train` in the order of epoch `epoch` (0-based); the summed weighted
    loss."""
    parts.model.train()
    total_loss = 0.0
    for inputs, labels, weights in batches(train, config.batch_size, seed=config.seed + epoch):
        inputs = {k: v.to(parts.device, non_blocking=True) for k, v in inputs.items()}
        labels = labels.to(parts.device, non_blocking=True)
        weights = weights.to(parts.device, non_blocking=True)
        with autocast_for(parts.device):
            loss = weighted_loss(parts.model(**inputs).float(), labels, weights)
        parts.optimizer.zero_grad(set_to_none=True)
        parts.scaler.scale(loss).backward()
        parts.scaler.unscale_(parts.optimizer)
        nn.utils.clip_grad_norm_(parts.model.parameters(), config.grad_clip_norm)
        parts.scaler.step(parts.optimizer)
        parts.scaler.update()
        parts.scheduler.step()
        if parts.averaged is not None:
            parts.averaged.update_parameters(parts.model)
        total_loss += loss.item() * float(weights.sum())
    return total_loss


def _settled(
    train_config: TrainConfig,
    train: FeatureArrays,
    validation: FeatureArrays | None,
    epochs: int | None,
) -> tuple[TrainConfig, FeatureArrays, int, torch.device]:
    """The training as it will run: its settings (a training without validation keeps its last
    epoch), its rows (the slice), its epochs and its device; torch's threads set."""
    if train_config.num_threads:
        torch.set_num_threads(train_config.num_threads)
    device = resolve_device(train_config)
    train = training_slice(train, train_config.max_train_rows, train_config.seed)
    if validation is not None and len(np.unique(validation.label)) < 2:
        raise PipelineError("validation split has a single class: validation AUC is undefined")
    if validation is None:
        train_config = train_config.model_copy(update={"keep": "last"})
    epochs = min(epochs or train_config.max_epochs, train_config.max_epochs)
    return train_config, train, epochs, device


def train_model(
    train_config: TrainConfig,
    architecture: ModelConfig,
    train: FeatureArrays,
    validation: FeatureArrays | None,
    dimensions: dict[str, Any],
    checkpoint_dir: Path,
    on_epoch_end: EpochCallback | None = None,
    epochs: int | None = None,
    upload_to: MlflowConfig | None = None,
) -> TrainResult:
    """Train (or resume from `checkpoint_dir/last.pt`, else from the checkpoint this training
    uploaded to `upload_to`'s tracking server) and return the kept epoch's model.

    Without `validation` (a refit on every season) nothing is judged: the model trains the
    first `epochs` epochs of the `max_epochs` schedule and keeps the last."""
    started = time.perf_counter()
    train_config, train, epochs, device = _settled(train_config, train, validation, epochs)
    config = architecture.with_inputs({**dimensions, **numeric_bins(architecture, train)})
    parts = _parts(config, train_config, len(train), device)
    state = TrainingState(signature=checkpoint_signature(config, train_config, len(train), epochs))
    checkpoint = checkpoint_dir / CHECKPOINT_FILE
    every = train_config.checkpoint_upload_every
    uploaded = _upload_slot(
        upload_to, train_config, state.signature, train, validation, checkpoint_dir
    )
    origin = uploaded.fetch(checkpoint) if uploaded and not checkpoint.exists() else None
    if checkpoint.exists():
        state = resume(checkpoint, state, *parts.checkpointed(), origin=origin)
    resumed_from = state.epoch
    patience = train_config.patience if train_config.keep == "best" else math.inf
    while state.epoch < epochs and state.bad_epochs < patience:
        record = _run_epoch(parts, train, validation, train_config, state.epoch)
        state.advance(record, parts.judged, keep_last=train_config.keep == "last")
        # What is left at the pace of this run's epochs so far (early stopping may end sooner).
        left = (
            (epochs - state.epoch) * (time.perf_counter() - started) / (state.epoch - resumed_from)
        )
        _log_progress(train_config.seed, record, epochs, left)
        save_checkpoint(checkpoint, state.checkpoint(*parts.checkpointed(), device))
        finished = state.epoch >= epochs or state.bad_epochs >= patience
        if uploaded and (finished or state.epoch % every == 0):
            uploaded.upload(checkpoint, state.epoch)
        if on_epoch_end is not None:
            on_epoch_end(record)
    parts.model.load_state_dict(state.best_state)
    return TrainResult(
        model=parts.model.cpu().eval(),
        config=config,
        seed=train_config.seed,
        history=tuple(state.history),
        best_epoch=state.best_epoch,
        best_val_auc=state.best_val_auc,
        stopped_early=state.bad_epochs >= patience,
        resumed_from_epoch=resumed_from,
        train_rows=len(train),
        device=str(device),
        seconds=time.perf_counter() - started,
    )


def _upload_slot(
    upload_to: MlflowConfig | None,
    train_config: TrainConfig,
    signature: str,
    train: FeatureArrays,
    validation: FeatureArrays | None,
    checkpoint_dir: Path,
) -> UploadedCheckpoint | None:
    """Where this training's checkpoint goes on `upload_to`'s tracking server; None when it is
    not uploaded (no server, or `train.checkpoint_upload_every` off)."""
    if upload_to is None or not train_config.checkpoint_upload_every:
        return None
    return UploadedCheckpoint(
        upload_to,
        training_key(signature, train, validation),
        signature,
        upload_folder(checkpoint_dir, train_config.checkpoint_dir),
        Lease.parse(train_config.lease),
    )


def _run_epoch(
    parts: _Parts,
    train: FeatureArrays,
    validation: FeatureArrays | None,
    train_config: TrainConfig,
    epoch: int,
) -> EpochRecord:
    """Epoch `epoch` (0-based) trained and judged on `validation`: its record."""
    started = time.perf_counter()
    total_loss = _train_epoch(parts, train, train_config, epoch)
    val_loss, val_auc = _judge(parts.judged, validation, 4 * train_config.batch_size, parts.device)
    return EpochRecord(
        epoch=epoch + 1,
        train_loss=total_loss / float(train.weight.sum()),
        val_loss=val_loss,
        val_auc=val_auc,
        learning_rate=parts.scheduler.get_last_lr()[0],
        seconds=time.perf_counter() - started,
    )


def _log_progress(seed: int, record: EpochRecord, epochs: int, left_s: float) -> None:
    logger.info(
        "seed %d epoch %d/%d  loss %.4f  val_loss %.4f  val_auc %.4f  lr %.2e  %.1fs  ETA %.0fs",
        seed,
        record.epoch,
        epochs,
        record.train_loss,
        record.val_loss,
        record.val_auc,
        record.learning_rate,
        record.seconds,
        left_s,
    )
