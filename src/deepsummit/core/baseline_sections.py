"""The baselines' settings: what a practitioner would use instead of the transformer (logistic
regression, LightGBM, CatBoost), each at the settings its own search chose.

Every value here was chosen on selection seasons before every scored one, by
bench/studies/which_tree_settings.py (its docstring and docs/evaluation.md say which seasons);
the number of boosting rounds is no setting: each held-out check counts it on its own
validation rows (deepsummit/train/baseline_protocol.py).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from deepsummit.core.sections import Section


class LightGBMConfig(Section):
    learning_rate: float = Field(0.05, gt=0)
    num_leaves: int = Field(31, ge=2)
    min_child_samples: int = Field(20, ge=1)
    # The share of columns each tree sees (LightGBM's feature_fraction).
    feature_fraction: float = Field(0.5, gt=0, le=1)
    lambda_l2: float = Field(0.0, ge=0)
    # The 26×16 weather window, flattened, among the inputs; False: the tabular inputs and the
    # calendar only.
    weather: bool = True


class CatBoostConfig(Section):
    learning_rate: float = Field(0.05, gt=0)
    depth: int = Field(6, ge=1, le=16)
    l2_leaf_reg: float = Field(3.0, gt=0)
    # The share of columns each split considers (CatBoost's rsm).
    rsm: float = Field(1.0, gt=0, le=1)
    weather: bool = True


class BaselinesConfig(Section):
    # The logistic regression's inverse regularisation strength (sklearn's C).
    logistic_c: float = Field(0.1, gt=0)
    lightgbm: LightGBMConfig = Field(default_factory=LightGBMConfig)
    catboost: CatBoostConfig = Field(default_factory=CatBoostConfig)
    # Early stopping counts a tree's rounds on the check's validation rows: at most this many,
    # stopping after `patience` rounds without a better validation AUC. A deep first tree can
    # rank well on its own, and at a small learning rate the trees after it took over 100
    # rounds to pass it (a CatBoost of depth 8 at 0.03 in the search stopped at its first).
    max_rounds: int = Field(2000, ge=1)
    patience: int = Field(300, ge=1)
    # Each tree is refit with this many seeds and answers their mean probability; None: as
    # many as the transformer's answer averages (its seeds × ensemble members).
    seeds: int | None = Field(None, ge=1)
    # The model a registered version serves (deepsummit/train/blending.py): "auto" chooses on
    # the member check (the transformer alone where it leads the best tree beyond noise, else
    # their blend); "transformer" or "blend" serve that one whatever the check says.
    served: Literal["auto", "transformer", "blend"] = "auto"
