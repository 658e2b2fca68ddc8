import torch

from deepsummit.model.tokenizer import TabularTokenizer, WeatherTokenizer

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
        linear = tokenizer.numeric[i]
        present = numeric[:, i : i + 1] * linear.weight.T + linear.bias  # Linear(1, H)
        expected = torch.where(numeric_missing[:, i : i + 1], tokenizer.numeric_missing[i], present)
        torch.testing.assert_close(tokens[:, i], expected)
    for i, embed in enumerate(tokenizer.categorical):
        torch.testing.assert_close(tokens[:, 8 + i], embed.weight[batch["categorical"][:, i]])
    for i, embed in enumerate(tokenizer.binary):
        present = embed.weight[batch["binary"][:, i]]
        expected = torch.where(
            batch["binary_missing"][:, i : i + 1], tokenizer.binary_missing[i], present
        )
        torch.testing.assert_close(tokens[:, 14 + i], expected)


def test_tabular_vocabularies_and_unknown_index(small_config):
    tokenizer = TabularTokenizer(small_config)
    sizes = tuple(embed.num_embeddings for embed in tokenizer.categorical)
    assert sizes == small_config.categorical_cardinalities
    assert all(embed.num_embeddings == 2 for embed in tokenizer.binary)


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
    assert torch.count_nonzero(tokenizer.numeric[0].weight.grad) == 0
    assert torch.count_nonzero(tokenizer.numeric_missing.grad[0]) > 0


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
