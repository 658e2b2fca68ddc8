"""A fold's caches follow what they depend on: the baselines' settings move the baselines' key
and never the transformer's trainings."""

from __future__ import annotations

import json
from pathlib import Path

from deepsummit.backtest.cache import baselines_key, trainings_key
from deepsummit.contracts.snapshot import PREPROCESSING_FILE
from deepsummit.core.config import load_settings


def test_the_baselines_settings_move_their_key_and_not_the_trainings(tmp_path: Path) -> None:
    (tmp_path / PREPROCESSING_FILE).write_text(json.dumps({"extra": {"snapshot_digest": "abc"}}))
    served = load_settings("cpu")
    other_trees = load_settings("cpu", {"baselines": {"catboost": {"depth": 4}}})
    other_network = load_settings("cpu", {"model": {"hidden_size": 64}})
    assert baselines_key(served, tmp_path) != baselines_key(other_trees, tmp_path)
    assert trainings_key(served, tmp_path) == trainings_key(other_trees, tmp_path)
    assert trainings_key(served, tmp_path) != trainings_key(other_network, tmp_path)
    assert baselines_key(served, tmp_path) == baselines_key(other_network, tmp_path)
