import torch

from deepsummit.model.tokenizer import (
    PiecewiseLinearEncoding,
    TabularTokenizer,
    WeatherTokenizer,
    quantile_bin_edges,
)

TABULAR_KEYS = ("numeric", "numeric_missing", "categorical", "binary", "binary_missing")
WEATHER_KEYS = ("weather", "weather_missing", "days_before", "day_of_year")


def tabular_inputs(batch):
    return [batch[key] for key in TABULAR_KEYS]


def weather_inputs(batch):
    return [batch[key] for key in WEATHER_KEYS]


def test_tabular_tokens_shape_and_per_feature_values(small_config, make_batch):
    tokenizer = TabularTokenizer(small_config)
    batch = make_batch(small_config, 4)
    tokens = tokenizer(*tabular_inputs(batch))
    assert tokens.shape == (4, 20, 16)  # (B, 20, H)

    numeric, numeric_missing = batch["numeric"], batch["numeric_missing"]
    for i in range(small_config.n_numeric):
        # Linear_i(1, H): x_i · w_i + b_i
        present = numeric[:, i : i + 1] * tokenizer.numeric_weight[i, 0] + tokenizer.numeric_bias[i]
        expected = torch.where(numeric_missing[:, i : i + 1], tokenizer.numeric_missing[i], present)
        torch.testing.assert_close(tokens[:, i], expected)
    for i, table in enumerate(feature_tables(tokenizer, small_config)[:6]):
        torch.testing.assert_close(tokens[:, 8 + i], table[batch["categorical"][:, i]])
    for i, table in enumerate(feature_tables(tokenizer, small_config)[6:]):
        present = table[batch["binary"][:, i]]
        expected = torch.where(
            batch["binary_missing"][:, i : i + 1], tokenizer.binary_missing[i], present
        )
        torch.testing.assert_close(tokens[:, 14 + i], expected)


def feature_tables(tokenizer, config) -> list[torch.Tensor]:
    """Each categorical and binary feature's own embedding: its slice of the shared table."""
    sizes = (*config.categorical_cardinalities, *(2,) * config.n_binary)
    return list(tokenizer.embedding.weight.split(sizes))


def test_tabular_vocabularies_and_unknown_index(small_config):
    tokenizer = TabularTokenizer(small_config)
    sizes = [len(table) for table in feature_tables(tokenizer, small_config)]
    assert sizes == [*small_config.categorical_cardinalities, *(2,) * small_config.n_binary]
    assert tokenizer.offsets.tolist() == [0, 7, 12, 15, 20, 24, 30, 32, 34, 36, 38, 40]


def test_missing_numeric_and_binary_ignore_the_raw_value(small_config, make_batch):
    tokenizer = TabularTokenizer(small_config)
    batch = make_batch(small_config, 4)
    batch["numeric_missing"][:, 2] = True
    batch["binary_missing"][:, 3] = True
    before = tokenizer(*tabular_inputs(batch))

    batch["numeric"][:, 2] = 1e6
    batch["binary"][:, 3] = 1 - batch["binary"][:, 3]
    after = tokenizer(*tabular_inputs(batch))

    assert torch.equal(before, after)
    torch.testing.assert_close(after[:, 2], tokenizer.numeric_missing[2].expand(4, -1))
    torch.testing.assert_close(after[:, 17], tokenizer.binary_missing[3].expand(4, -1))


def test_missing_numeric_gives_no_gradient_to_its_linear(small_config, make_batch):
    tokenizer = TabularTokenizer(small_config)
    batch = make_batch(small_config, 4)
    batch["numeric_missing"][:, 0] = True
    tokenizer(*tabular_inputs(batch)).sum().backward()
    assert torch.count_nonzero(tokenizer.numeric_weight.grad[0]) == 0
    assert torch.count_nonzero(tokenizer.numeric_weight.grad[1]) > 0
    assert torch.count_nonzero(tokenizer.numeric_missing.grad[0]) > 0


def test_piecewise_linear_encoding_matches_its_definition():
    """e_t = (x − b_{t−1}) / (b_t − b_{t−1}) clipped to [0, 1]; the first bin open below, the
    last open above; a feature with fewer bins has zeros in the rest."""
    encoding = PiecewiseLinearEncoding(((0.0, 1.0, 3.0), (-1.0, 1.0)))
    x = torch.tensor([[-1.0, 0.0], [0.5, 3.0], [2.0, -3.0], [5.0, 1.0]])  # (B, N_num)
    expected = torch.tensor(
        [
            [[-1.0, 0.0], [0.5, 0.0]],  # below b_0: the first bin goes negative
            [[0.5, 0.0], [2.0, 0.0]],  # above the second feature's last edge: > 1
            [[1.0, 0.5], [-1.0, 0.0]],
            [[1.0, 2.0], [1.0, 0.0]],  # above the first feature's last edge: > 1
        ]
    )
    torch.testing.assert_close(encoding(x), expected)


def test_quantile_bin_edges_are_distinct_quantiles_of_the_present_values():
    values = torch.tensor([[0.0, 5.0], [1.0, 5.0], [2.0, 5.0], [3.0, 5.0], [100.0, 7.0]])
    missing = torch.tensor([[False, False]] * 4 + [[True, True]])  # 100 and 7 are missing
    edges = quantile_bin_edges(values, missing, bins=3)
    assert edges[0] == (0.0, 1.0, 2.0, 3.0)
    assert edges[1] == (-1.0, 1.0)  # one distinct value: a single, neutral bin


def test_piecewise_numeric_tokens_are_ple_times_each_features_weights(small_config, make_batch):
    from dataclasses import replace

    edges = tuple((-1.0, 0.0, 1.0) for _ in range(small_config.n_numeric))
    config = replace(small_config, numeric_embedding="piecewise", numeric_bin_edges=edges)
    tokenizer = TabularTokenizer(config)
    batch = make_batch(config, 4)
    batch["numeric_missing"][:] = False
    tokens = tokenizer(*tabular_inputs(batch))
    encoded = tokenizer.piecewise(batch["numeric"])  # (B, N_num, T)
    for i in range(config.n_numeric):
        expected = encoded[:, i] @ tokenizer.numeric_weight[i] + tokenizer.numeric_bias[i]
        torch.testing.assert_close(tokens[:, i], expected)


def test_weather_tokens_shape_and_formula(small_config, make_batch):
    tokenizer = WeatherTokenizer(small_config)
    batch = make_batch(small_config, 3)
    tokens = tokenizer(*weather_inputs(batch))
    assert tokens.shape == (3, 26, 16)  # (B, 26, H)

    weather, missing = batch["weather"], batch["weather_missing"]
    temporal = torch.cat(
        [
            tokenizer.time2vec_days_before(batch["days_before"]),  # (B, 26, 32)
            tokenizer.time2vec_day_of_year(batch["day_of_year"]),  # (B, 26, 32)
        ],
        dim=-1,
    )
    assert temporal.shape == (3, 26, 64)
    expected = (
        torch.where(missing, 0.0, weather) @ tokenizer.weather_proj.weight.T
        + tokenizer.weather_proj.bias
        + missing.float() @ tokenizer.missing_proj.weight.T
        + tokenizer.temporal_proj(temporal)
    )
    torch.testing.assert_close(tokens, expected)


def test_missing_weather_is_marked_not_zero(small_config, make_batch):
    tokenizer = WeatherTokenizer(small_config)
    batch = make_batch(small_config, 2)
    batch["weather_missing"][:] = False
    batch["weather"][0, 5, 7] = 0.0  # a real zero …
    observed = tokenizer(*weather_inputs(batch))
    batch["weather_missing"][0, 5, 7] = True  # … and a missing value are different tokens
    batch["weather"][0, 5, 7] = 123.0  # whatever the caller left there
    marked = tokenizer(*weather_inputs(batch))

    difference = marked - observed
    torch.testing.assert_close(difference[0, 5], tokenizer.missing_proj.weight[:, 7])
    difference[0, 5] = 0.0
    torch.testing.assert_close(difference, torch.zeros_like(difference))  # nothing else moved
