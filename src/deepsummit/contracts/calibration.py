"""Post-hoc calibration: a map from the model's logit to a probability, fitted on held-out member
records (the member check, deepsummit/train/recipe.py) and applied to everything the model says
afterwards.

- temperature: p = σ(z / T), one parameter; keeps the ranking, fixes over- or under-confidence.
- platt: p = σ(a·z + b), two parameters; also moves the base rate.
- isotonic: a monotone step function of z fitted by pool-adjacent-violators; the most flexible.

Which one the models use is `train.calibration` (deepsummit/core/sections.py says why the default
is the one it is). Temperature and Platt are strictly monotone in z, so they leave the AUC as it
was; isotonic's steps tie rows and can change it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Literal

import numpy as np

Method = Literal["none", "temperature", "platt", "isotonic"]


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def _log_loss(params: np.ndarray, logits: np.ndarray, labels: np.ndarray, platt: bool) -> float:
    a, b = (params[0], params[1]) if platt else (1.0 / params[0], 0.0)
    p = np.clip(_sigmoid(a * logits + b), 1e-12, 1 - 1e-12)
    return float(-np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p)))


@dataclass(frozen=True)
class Calibrator:
    method: Method
    scale: float = 1.0  # temperature: 1 / T; platt: a
    shift: float = 0.0  # platt: b
    # isotonic: the fitted step function, logit thresholds and their probabilities
    thresholds: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)

    @classmethod
    def fit(cls, method: Method, logits: np.ndarray, labels: np.ndarray) -> Calibrator:
        # Imported here: fitting is training's; a model that only applies its map (every
        # `deepsummit predict`) is spared their second of imports.
        from scipy.optimize import minimize
        from sklearn.isotonic import IsotonicRegression

        logits, labels = np.asarray(logits, np.float64), np.asarray(labels, np.float64)
        if method == "none":
            return cls("none")
        if method == "isotonic":
            iso = IsotonicRegression(out_of_bounds="clip", y_min=0.0, y_max=1.0)
            iso.fit(logits, labels)
            return cls(
                "isotonic",
                thresholds=[float(x) for x in iso.X_thresholds_],
                values=[float(y) for y in iso.y_thresholds_],
            )
        platt = method == "platt"
        start = np.array([1.0, 0.0]) if platt else np.array([1.0])
        bounds = [(-10.0, 10.0), (-10.0, 10.0)] if platt else [(0.05, 20.0)]
        result = minimize(_log_loss, start, args=(logits, labels, platt), bounds=bounds)
        if platt:
            return cls("platt", scale=float(result.x[0]), shift=float(result.x[1]))
        return cls("temperature", scale=float(1.0 / result.x[0]))

    def probabilities(self, logits: np.ndarray) -> np.ndarray:
        """Element by element, for logits of any shape (one seed's (N,), the seeds' (S, N))."""
        z = np.asarray(logits, np.float64)
        if self.method == "isotonic":
            return np.interp(z, self.thresholds, self.values)
        return _sigmoid(self.scale * z + self.shift)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> Calibrator:
        return cls(**json.loads(text))
