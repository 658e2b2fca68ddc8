"""The served blend: the transformer and the best tree as one model.

The train stage serves a blend when the transformer alone does not lead the best tree on the
member check (deepsummit/train/blending.py chooses it there). Each part answers through its own
map, fitted on the member check; the blend's answer is their logits mixed with the
transformer's weight w, fitted on the member check's rows:

    P = σ(w · logit(P_transformer) + (1 − w) · logit(P_tree))

A registered version holds it in `blend/` (deepsummit/contracts/artifact.py): `blend.json` (the
tree's library, w, whether its matrix reads the weather, its map, its files) and the tree's
models, one per seed, in their library's own format (deepsummit/contracts/trees.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from deepsummit.contracts.arrays import FeatureArrays
from deepsummit.contracts.calibration import Calibrator
from deepsummit.contracts.trees import SavedTrees

BLEND_DIR = "blend"
BLEND_FILE = "blend.json"
TRANSFORMER_PART = "transformer"


def _logit(probabilities: np.ndarray) -> np.ndarray:
    p = np.clip(np.asarray(probabilities, np.float64), 1e-7, 1 - 1e-7)
    return np.log(p / (1 - p))


def mix(transformer: np.ndarray, tree: np.ndarray, weight: float) -> np.ndarray:
    """The blend's answer from its parts' answers (the module docstring's formula)."""
    z = weight * _logit(transformer) + (1 - weight) * _logit(tree)
    return 1.0 / (1.0 + np.exp(-z))


def parts_line(tree: str, weight: float) -> str:
    """Which parts answer, with their weights: "transformer 0.55 + CatBoost 0.45"."""
    return f"{TRANSFORMER_PART} {weight:.2f} + {tree} {1 - weight:.2f}"


@dataclass(frozen=True)
class Blend:
    """The tree part of a served blend, and the transformer's weight."""

    trees: SavedTrees
    weight: float  # w, the transformer's share of the logit
    calibrator: Calibrator  # the tree's map, fitted on the member check

    @property
    def parts(self) -> str:
        return parts_line(self.trees.library, self.weight)

    def tree_answers(self, arrays: FeatureArrays, rows: pl.DataFrame) -> np.ndarray:
        """(N,) the tree's answer through its map (`rows`: the member columns the map reads)."""
        return self.calibrator.probabilities(_logit(self.trees.probability(arrays)), rows)

    def save(self, directory: Path) -> None:
        folder = directory / BLEND_DIR
        files = self.trees.save(folder)
        description = {
            "tree": self.trees.library,
            "weight": self.weight,
            "weather": self.trees.weather,
            "calibration": json.loads(self.calibrator.to_json()),
            "files": files,
        }
        (folder / BLEND_FILE).write_text(json.dumps(description, indent=2))

    @classmethod
    def load(cls, directory: Path) -> Blend | None:
        """The blend of the version at `directory`; None for a version that serves the
        transformer alone."""
        folder = directory / BLEND_DIR
        if not (folder / BLEND_FILE).exists():
            return None
        description = json.loads((folder / BLEND_FILE).read_text())
        return cls(
            SavedTrees.load(
                description["tree"], description["weather"], folder, description["files"]
            ),
            float(description["weight"]),
            Calibrator.from_json(json.dumps(description["calibration"])),
        )
