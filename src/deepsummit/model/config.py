"""`ModelConfig`: the architecture, the spec's base configuration by default.

Shape comments across the model name the sizes it fixes (the spec's values in brackets):
B batch, H hidden_size [256], n_h num_heads [8], N_num / N_cat / N_bin numeric, categorical and
binary tabular inputs [8 / 6 / 6], T_tab = N_num + N_cat + N_bin tabular tokens [20], T_w
weather tokens [26 = 7 + 10 + 9], V weather variables per token [15], S = 1 + T_tab + T_w
positions [47], k ensemble members [1].

It is also the settings' `model` section (`Settings.model`, deepsummit/core/config.py): a
profile sets the knobs (hidden size, layers, heads, dropout, …); the fields in
`INPUT_DIMENSIONS` are fixed by the model's inputs, filled in from the features at training
(`with_inputs`), never by a setting.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal


@dataclass(frozen=True)
class ModelConfig:
    INPUT_DIMENSIONS: ClassVar[tuple[str, ...]] = (
        "n_numeric",
        "n_binary",
        "categorical_cardinalities",
        "n_weather_vars",
        "numeric_bin_edges",
    )

    hidden_size: int = 256  # H
    num_layers: int = 6  # L
    num_heads: int = 8  # n_h; head_dim d_k = H / n_h = 32
    dropout: float = 0.1
    # On the attention weights, as the spec's reference code; None = `dropout`. On a CPU its
    # Bernoulli masks (B × n_h × S × S per layer) cost about a third of a training step.
    attention_dropout: float | None = None
    drop_path_rate: float = 0.1  # p_max of the linear schedule over layers
    # k members inside one network (BatchEnsemble, as TabM; deepsummit/model/ensemble.py). They
    # share the tokenizers and the first L − ensemble_layers blocks; the last `ensemble_layers`
    # blocks and the head run once per member, every linear map carrying each member's rank-1
    # adapters. The answer is the members' mean probability, their spread its band. 1 = the
    # spec's single network.
    ensemble_size: int = 1
    ensemble_layers: int = 1
    # How a numeric input becomes its token: "linear" is the spec's Linear_i(x_i); "piecewise"
    # encodes x_i over `numeric_bins` quantile bins of the training split first (Gorishniy et
    # al. 2022; deepsummit/model/tokenizer.py).
    numeric_embedding: Literal["linear", "piecewise"] = "linear"
    numeric_bins: int = 16
    time2vec_dim: int = 32  # per temporal input; two of them are concatenated → 64
    n_numeric: int = 8
    n_binary: int = 6
    # Vocabulary size per categorical feature, index 0 = unknown included. The default is the
    # spec's reference TabularTokenizer (nationality, route1, himal, season, style, peakid);
    # a trained model gets the sizes of the vocabularies built from its training split.
    categorical_cardinalities: tuple[int, ...] = (151, 101, 21, 5, 4, 15)
    n_weather_vars: int = 15
    # Per numeric input, the ascending edges of its quantile bins on the training split (z-scored
    # values); filled in at training when numeric_embedding is "piecewise", empty otherwise.
    numeric_bin_edges: tuple[tuple[float, ...], ...] = ()
    weather_scale_tokens: tuple[int, ...] = (7, 10, 9)  # 7 daily, 10 three-day, 9 ten-day
    # Time2Vec frequencies start at N(0, 1) × 2π/period so that ω·t spans about one cycle over
    # the input's range instead of hundreds of radians (day_of_year reaches 366).
    days_before_period: float = 90.0
    day_of_year_period: float = 365.25

    def __post_init__(self) -> None:
        # Tuples even when built from JSON lists, so the config stays hashable and comparable.
        object.__setattr__(self, "categorical_cardinalities", tuple(self.categorical_cardinalities))
        object.__setattr__(self, "weather_scale_tokens", tuple(self.weather_scale_tokens))
        object.__setattr__(
            self, "numeric_bin_edges", tuple(tuple(edges) for edges in self.numeric_bin_edges)
        )
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}"
            )
        if any(size < 1 for size in self.categorical_cardinalities):
            raise ValueError(
                f"categorical cardinalities must be ≥ 1: {self.categorical_cardinalities}"
            )
        if self.ensemble_size < 1 or not 1 <= self.ensemble_layers <= self.num_layers:
            raise ValueError(
                f"ensemble_size {self.ensemble_size} must be ≥ 1 and ensemble_layers "
                f"{self.ensemble_layers} between 1 and num_layers {self.num_layers}"
            )
        if self.numeric_bin_edges and len(self.numeric_bin_edges) != self.n_numeric:
            raise ValueError(
                f"numeric_bin_edges has {len(self.numeric_bin_edges)} inputs, not {self.n_numeric}"
            )

    def with_inputs(self, dimensions: dict[str, Any]) -> ModelConfig:
        """This architecture over inputs of the given dimensions (`INPUT_DIMENSIONS` only)."""
        unknown = set(dimensions) - set(self.INPUT_DIMENSIONS)
        if unknown:
            raise ValueError(f"not dimensions the inputs fix: {sorted(unknown)}")
        return replace(self, **dimensions)

    @property
    def ffn_hidden_size(self) -> int:
        """SwiGLU hidden width 8H/3, rounded (683 for H = 256, as in the parameter estimate)."""
        return round(8 * self.hidden_size / 3)

    @property
    def n_categorical(self) -> int:
        return len(self.categorical_cardinalities)

    @property
    def n_tabular_tokens(self) -> int:
        return self.n_numeric + self.n_categorical + self.n_binary  # T_tab

    @property
    def n_weather_tokens(self) -> int:
        return sum(self.weather_scale_tokens)  # T_w

    @property
    def sequence_length(self) -> int:
        return 1 + self.n_tabular_tokens + self.n_weather_tokens  # S
