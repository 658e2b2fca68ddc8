"""Tensors on disk: checkpoints and a model's weights, written atomically and read without
executing anything. Torch only, so a trainer on a bare GPU machine needs nothing else."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch


def save_tensors(path: Path, state: dict[str, Any]) -> None:
    """Write atomically: a crash mid-write leaves the previous file intact, and writers of the
    same path at once never share a temporary file (each gets a unique one, never left behind)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(
        dir=path.parent, prefix=f".{path.name}.", suffix=".partial", delete=False
    ) as handle:
        partial = Path(handle.name)
        try:
            os.fchmod(handle.fileno(), 0o644)  # tempfile makes it 0600; outputs are readable
            torch.save(state, handle)
            handle.flush()
            os.fsync(handle.fileno())  # on disk before the name points at it
            os.replace(partial, path)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise


def load_tensors(path: Path) -> dict[str, Any]:
    """Tensors and plain containers only; anything else is refused, never executed."""
    return torch.load(path, map_location="cpu", weights_only=True)
