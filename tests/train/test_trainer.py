"""The trainer: it learns, it stops early, it resumes bit-exactly, it decays only what it should."""

from __future__ import annotations

import copy
import logging
import pickle
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from synthetic import DIMENSIONS, synthetic_arrays
from torch import nn

from deepsummit.contracts.tensors import load_tensors, save_tensors
from deepsummit.core.config import load_settings
from deepsummit.core.errors import PipelineError
from deepsummit.model.config import ModelConfig
from deepsummit.model.transformer import DeepSummitTransformer
from deepsummit.serve.inference import predict_proba
from deepsummit.train.checkpoint import CHECKPOINT_FILE
from deepsummit.train.trainer import (
    parameter_groups,
    resolve_device,
    train_model,
    training_slice,
    warmup_cosine,
    weighted_loss,
)


def tiny_settings(**train: object):
    return load_settings(
        "tiny",
        overrides={"train": {"learning_rate": 1e-2, "max_epochs": 3, "num_threads": 1, **train}},
    )


def fit(settings, *args, **kwargs):
    """train_model with the sections of `settings`."""
    return train_model(settings.train, settings.model, *args, **kwargs)


class Killed(Exception):
    """A run killed after its first epoch (once the epoch's checkpoint is written)."""


def kill_after_first_epoch(record) -> None:
    if record.epoch == 1:
        raise Killed


@pytest.fixture(scope="module")
def splits():
    return synthetic_arrays(2000, seed=1), synthetic_arrays(300, seed=2)


def test_training_learns_the_signal_and_keeps_the_best_epoch(splits, tmp_path: Path) -> None:
    train, validation = splits
    result = fit(tiny_settings(), train, validation, DIMENSIONS, tmp_path)
    assert [record.epoch for record in result.history] == [1, 2, 3]
    assert result.best_val_auc == max(record.val_auc for record in result.history)
    assert result.best_val_auc > 0.7  # the labels follow a logit of 2·x₀ + …
    assert not result.model.training
    assert (tmp_path / CHECKPOINT_FILE).exists()


def test_a_run_killed_after_an_epoch_resumes_to_the_same_weights(
    splits, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    train, validation = splits
    settings = tiny_settings()
    uninterrupted = fit(settings, train, validation, DIMENSIONS, tmp_path / "a")

    with pytest.raises(Killed):
        fit(
            settings,
            train,
            validation,
            DIMENSIONS,
            tmp_path / "b",
            kill_after_first_epoch,
        )
    caplog.clear()  # only the resumed run's lines
    with caplog.at_level(logging.INFO, logger="deepsummit.train"):
        resumed = fit(settings, train, validation, DIMENSIONS, tmp_path / "b")

    assert resumed.resumed_from_epoch == 1
    # The log says it resumed and from where, then one line per epoch it ran, with its ETA.
    assert caplog.messages[0] == f"resuming from {tmp_path / 'b' / 'last.pt'} after epoch 1"
    epochs = [m for m in caplog.messages if m.startswith("seed ")]
    last = settings.train.max_epochs
    assert [m.split()[3] for m in epochs] == [f"{e}/{last}" for e in range(2, last + 1)]
    assert all("val_auc" in m and "ETA" in m for m in epochs)

    def progress(result):
        return [(r.epoch, r.train_loss, r.val_loss, r.val_auc) for r in result.history]

    assert progress(resumed) == progress(uninterrupted)
    expected = uninterrupted.model.state_dict()
    for name, tensor in resumed.model.state_dict().items():
        assert torch.equal(tensor, expected[name]), name


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_a_killed_run_resumes_and_its_model_comes_back_to_the_cpu(
    splits, tmp_path: Path
) -> None:
    """The CUDA path: bf16 autocast, a checkpoint written on the GPU and resumed there, and the
    kept weights returned on the CPU, where they answer as on the GPU."""
    train, validation = splits
    settings = tiny_settings(device="cuda")
    with pytest.raises(Killed):
        fit(settings, train, validation, DIMENSIONS, tmp_path, kill_after_first_epoch)
    resumed = fit(settings, train, validation, DIMENSIONS, tmp_path)
    assert resumed.device == "cuda" and resumed.resumed_from_epoch == 1
    assert [r.epoch for r in resumed.history] == [1, 2, 3]
    assert resumed.best_val_auc > 0.7
    assert {p.device.type for p in resumed.model.parameters()} == {"cpu"}
    on_gpu = predict_proba(copy.deepcopy(resumed.model).cuda(), validation, device="cuda")
    np.testing.assert_allclose(predict_proba(resumed.model, validation), on_gpu, atol=0.02)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_auto_without_cuda_is_refused_in_one_line_unless_the_cpu_fallback_is_set(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The base profile's device: on a machine without CUDA it refuses by default; with
    train.cpu_fallback it takes the CPU and says so once."""
    base = load_settings("base").train
    assert base.device == "auto" and not base.cpu_fallback
    with pytest.raises(PipelineError, match=r"no CUDA device.*cpu_fallback = true") as refused:
        resolve_device(base)
    assert "\n" not in str(refused.value)

    allowed = base.model_copy(update={"cpu_fallback": True})
    with caplog.at_level(logging.WARNING, logger="deepsummit.train.trainer"):
        devices = {resolve_device(allowed).type for _ in range(3)}
    assert devices == {"cpu"}
    assert len([r for r in caplog.records if "cpu_fallback" in r.getMessage()]) <= 1


def test_without_validation_it_trains_the_epochs_asked_of_the_schedule_and_keeps_the_last(
    splits, tmp_path: Path
) -> None:
    """The refit on every season: nothing to judge by, so the epochs the evaluation kept, on
    the same schedule (the learning rate where the evaluation's stood), and the last weights."""
    train, validation = splits
    settings = tiny_settings(max_epochs=3)
    judged = fit(settings, train, validation, DIMENSIONS, tmp_path / "judged")
    refit = fit(settings, train, None, DIMENSIONS, tmp_path / "refit", epochs=2)
    assert [r.epoch for r in refit.history] == [1, 2]
    assert refit.best_epoch == 2 and np.isnan(refit.best_val_auc)
    assert refit.history[-1].learning_rate == judged.history[1].learning_rate > 0
    assert refit.history[1].train_loss == judged.history[1].train_loss  # the same steps


def test_ema_weights_are_what_is_judged_and_kept(splits, tmp_path: Path) -> None:
    train, validation = splits
    plain = fit(tiny_settings(keep="last"), train, validation, DIMENSIONS, tmp_path / "a")
    averaged = fit(
        tiny_settings(keep="last", ema_decay=0.9), train, validation, DIMENSIONS, tmp_path / "b"
    )
    # The same steps (the losses are the live weights'), other weights judged and kept.
    assert [r.train_loss for r in averaged.history] == [r.train_loss for r in plain.history]
    assert averaged.history[-1].val_auc != plain.history[-1].val_auc
    weights = averaged.model.state_dict()
    assert any(not torch.equal(weights[k], v) for k, v in plain.model.state_dict().items())


def test_the_loss_averages_members_and_weighs_rows() -> None:
    logits = torch.tensor([[0.0, 2.0], [1.0, -1.0], [3.0, 3.0]])  # (B, k)
    labels = torch.tensor([1.0, 0.0, 1.0])
    weights = torch.tensor([1.0, 3.0, 0.0])
    per_member = torch.nn.functional.binary_cross_entropy_with_logits(
        logits, labels[:, None].expand(3, 2), reduction="none"
    )
    expected = (per_member.mean(1) * weights).sum() / weights.sum()
    torch.testing.assert_close(weighted_loss(logits, labels, weights), expected)
    assert weighted_loss(logits[:2], labels[:2], weights[:2]) == expected  # weight 0: no say


def test_early_stopping_stops_after_patience_epochs_without_improvement(
    splits, tmp_path: Path
) -> None:
    train, validation = splits
    # lr 0: the validation AUC never improves after the first epoch.
    settings = tiny_settings(learning_rate=0.0, max_epochs=10, patience=2)
    result = fit(settings, train, validation, DIMENSIONS, tmp_path)
    assert len(result.history) == 3
    assert result.stopped_early
    assert result.best_epoch == 1


def test_max_train_rows_takes_the_same_rows_every_time(splits) -> None:
    train, _ = splits
    first = training_slice(train, 300, seed=7)
    again = training_slice(train, 300, seed=7)
    assert len(first) == 300
    np.testing.assert_array_equal(first.numeric, again.numeric)
    assert training_slice(train, None, seed=7) is train


def test_weight_decay_applies_to_linear_weights_only() -> None:
    model = DeepSummitTransformer(ModelConfig(hidden_size=16, num_layers=2, num_heads=2))
    decayed, undecayed = parameter_groups(model, 0.05)
    assert decayed["weight_decay"] == 0.05 and undecayed["weight_decay"] == 0.0
    decayed_ids = {id(p) for p in decayed["params"]}
    names = {id(p): name for name, p in model.named_parameters()}
    for name, parameter in model.named_parameters():
        no_decay = (
            name.endswith("bias")
            or "norm" in name
            or "cls_token" in name
            or "time2vec" in name
            or "missing" in name
            or "tabular_tokenizer" in name
            or "modality" in name
        )
        assert (id(parameter) not in decayed_ids) == no_decay, name
    assert "encoder.blocks.0.attention.q_proj.weight" in {names[i] for i in decayed_ids}
    every = decayed_ids | {id(p) for p in undecayed["params"]}
    assert every == {id(p) for p in model.parameters()}


def test_schedule_warms_up_linearly_then_decays_to_zero() -> None:
    multiplier = warmup_cosine(total_steps=200, warmup_fraction=0.05)  # 10 warmup steps
    assert multiplier(0) == pytest.approx(0.1)
    assert multiplier(9) == pytest.approx(1.0)
    assert multiplier(105) == pytest.approx(0.5)
    assert multiplier(199) < 1e-3
    values = [multiplier(step) for step in range(10, 200)]
    assert values == sorted(values, reverse=True)


def test_checkpoints_hold_tensors_only_and_refuse_pickled_objects(tmp_path: Path) -> None:
    layer = nn.Linear(3, 2)
    save_tensors(tmp_path / "ok.pt", {"weights": layer.state_dict(), "epoch": 3})
    assert load_tensors(tmp_path / "ok.pt")["epoch"] == 3

    torch.save({"payload": Path("/etc/passwd")}, tmp_path / "evil.pt")  # any non-tensor object
    with pytest.raises(pickle.UnpicklingError):
        load_tensors(tmp_path / "evil.pt")


@pytest.mark.parametrize(
    "damage",
    [
        lambda good: b"",  # created, never written
        lambda good: good[: len(good) // 2],  # cut off mid-write
        lambda good: b"PK\x03\x04 not a torch file",
    ],
    ids=["empty", "cut in half", "not a checkpoint"],
)
def test_a_corrupt_checkpoint_restarts_training_with_a_warning(
    splits, tmp_path: Path, caplog: pytest.LogCaptureFixture, damage
) -> None:
    train, validation = splits
    checkpoint = tmp_path / CHECKPOINT_FILE
    save_tensors(checkpoint, {"epoch": 1, "weights": torch.zeros(4_096)})
    checkpoint.write_bytes(damage(checkpoint.read_bytes()))
    with caplog.at_level(logging.WARNING, logger="deepsummit.train"):
        result = fit(tiny_settings(max_epochs=1), train, validation, DIMENSIONS, tmp_path)
    assert result.resumed_from_epoch == 0 and [r.epoch for r in result.history] == [1]
    assert any(
        message.startswith(f"{checkpoint} is unreadable") and "training from scratch" in message
        for message in caplog.messages
    )
    assert load_tensors(checkpoint)["epoch"] == 1  # replaced by a good checkpoint


def test_a_failed_write_keeps_the_previous_checkpoint_and_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkpoint = tmp_path / CHECKPOINT_FILE
    save_tensors(checkpoint, {"epoch": 1})

    def disk_full(state: object, handle) -> None:
        handle.write(b"the first bytes of a checkpoint")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", disk_full)
    with pytest.raises(OSError, match="No space left"):
        save_tensors(checkpoint, {"epoch": 2})
    monkeypatch.undo()
    assert load_tensors(checkpoint)["epoch"] == 1
    assert [path.name for path in tmp_path.iterdir()] == [CHECKPOINT_FILE]


def test_writers_of_one_checkpoint_at_once_never_share_a_temporary_file(tmp_path: Path) -> None:
    checkpoint = tmp_path / CHECKPOINT_FILE
    states = [
        {"writer": torch.tensor(writer), "payload": torch.full((20_000,), float(writer))}
        for writer in range(2)
    ]
    errors: list[BaseException] = []

    def write_repeatedly(state: dict) -> None:
        for _ in range(25):
            try:
                save_tensors(checkpoint, state)
            except OSError as error:  # a shared temporary name: renamed away by the other
                errors.append(error)

    writers = [threading.Thread(target=write_repeatedly, args=(state,)) for state in states]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    assert errors == []
    final = load_tensors(checkpoint)
    assert torch.equal(final["payload"], states[int(final["writer"])]["payload"])
    assert [path.name for path in tmp_path.iterdir()] == [CHECKPOINT_FILE]
