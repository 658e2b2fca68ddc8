import dataclasses
import json

import pytest
import torch

from deepsummit.model.config import ModelConfig
from deepsummit.model.summary import parameter_breakdown
from deepsummit.model.transformer import DeepSummitTransformer


def test_logits_and_intermediate_shapes(small_config, make_batch):
    torch.manual_seed(0)
    model = DeepSummitTransformer(small_config).eval()
    batch = make_batch(small_config, 5)

    logits = model(**batch)
    logits_again, attention = model(**batch, return_attention=True)

    assert logits.shape == (5, 1)  # (B, k): one member, the spec's single network
    torch.testing.assert_close(logits_again, logits, atol=1e-5, rtol=1e-5)
    assert len(attention) == small_config.num_layers
    for weights in attention[:-1]:
        assert weights.shape == (5, 2, 47, 47)  # (B, n_h, S, S)
        torch.testing.assert_close(weights.sum(-1), torch.ones(5, 2, 47))
    assert attention[-1].shape == (5, 2, 1, 47)  # the last block: CLS's row
    assert model.modality.ids.tolist() == [0] + [1] * 20 + [2] * 7 + [3] * 10 + [4] * 9


def test_cls_sits_at_position_zero_with_modality_zero(small_config, make_batch):
    model = DeepSummitTransformer(small_config).eval()
    captured = {}
    model.encoder.register_forward_hook(lambda _m, args, _o: captured.update(sequence=args[0]))
    model(**make_batch(small_config, 2))
    sequence = captured["sequence"]
    assert sequence.shape == (2, 47, 16)  # full_sequence (B, 47, H)
    expected_cls = model.cls_token[0, 0] + model.modality.embedding.weight[0]
    torch.testing.assert_close(sequence[:, 0], expected_cls.expand(2, -1))


def test_base_parameter_count_matches_spec_estimate():
    model = DeepSummitTransformer(ModelConfig())
    breakdown = parameter_breakdown(model)
    print("\nDeepSummitTransformer (base) parameters:")
    for component, count in breakdown.items():
        print(f"  {component:<22}{count:>12,}")

    assert breakdown["total"] == pytest.approx(4.9e6, rel=0.05)
    assert breakdown["total"] == sum(v for k, v in breakdown.items() if k != "total")
    # Per layer: 2H (norms) + 4H² (attention) + 3·H·683 (SwiGLU) = 787,200 (spec: ~787K).
    assert breakdown["encoder.block_0"] == 2 * 256 + 4 * 256**2 + 3 * 256 * 683
    assert breakdown["head"] == 256 * 256 + 256 + 256 + 1  # 66,049


def test_config_round_trips_through_json_and_rejects_bad_heads(small_config):
    saved = json.dumps(dataclasses.asdict(small_config))  # saved with the model
    assert ModelConfig(**json.loads(saved)) == small_config
    assert ModelConfig().sequence_length == 47
    with pytest.raises(ValueError, match="not divisible"):
        ModelConfig(hidden_size=30, num_heads=8)


def test_missing_numeric_changes_logits_only_through_its_embedding(small_config, make_batch):
    torch.manual_seed(0)
    model = DeepSummitTransformer(small_config).eval()
    batch = make_batch(small_config, 4)
    batch["numeric_missing"][:, 1] = True
    before = model(**batch)

    batch["numeric"][:, 1] = -50.0
    assert torch.equal(model(**batch), before)

    with torch.no_grad():
        model.tabular_tokenizer.numeric_missing[1] += 1.0
    assert not torch.allclose(model(**batch), before)


def test_missing_weather_changes_logits_only_through_its_mask_projection(small_config, make_batch):
    torch.manual_seed(0)
    model = DeepSummitTransformer(small_config).eval()
    batch = make_batch(small_config, 4)
    batch["weather_missing"][:, 3, 4] = True
    before = model(**batch)

    batch["weather"][:, 3, 4] = 99.0
    assert torch.equal(model(**batch), before)

    with torch.no_grad():
        model.weather_tokenizer.missing_proj.weight[:, 4] += 1.0
    assert not torch.allclose(model(**batch), before)


def test_absent_weather_takes_no_part(small_config, make_batch):
    """An attempt without weather (every value of every weather token missing) is answered
    from CLS and the tabular tokens alone: nothing of its weather tokens reaches the logit."""
    torch.manual_seed(0)
    model = DeepSummitTransformer(small_config).eval()
    batch = make_batch(small_config, 4)
    batch["weather_missing"][:2] = True
    before = model(**batch)

    batch["days_before"][:2] += 17.0  # the time encodings of absent tokens do not count either
    with torch.no_grad():
        model.weather_tokenizer.missing_proj.weight += 1.0
        model.modality.embedding.weight[2:] += 1.0  # the weather scales' modality embeddings
    after = model(**batch)
    torch.testing.assert_close(after[:2], before[:2], atol=1e-6, rtol=1e-6)
    assert not torch.allclose(after[2:], before[2:])  # rows with weather do read them

    _, attention = model(**batch, return_attention=True)
    weather = slice(1 + small_config.n_tabular_tokens, None)
    for weights in attention:
        assert torch.all(weights[:2, :, :, weather] == 0)  # no query reads an absent key
        assert torch.all(weights[2:, :, :, weather] > 0)


def test_deterministic_under_a_seed(small_config, make_batch):
    batch = make_batch(small_config, 3)
    torch.manual_seed(7)
    first = DeepSummitTransformer(small_config).eval()
    torch.manual_seed(7)
    second = DeepSummitTransformer(small_config).eval()

    assert torch.equal(first(**batch), second(**batch))
    assert torch.equal(first(**batch), first(**batch))  # eval: no dropout, no DropPath

    first.train()
    torch.manual_seed(1)
    train_a = first(**batch)
    torch.manual_seed(1)
    assert torch.equal(first(**batch), train_a)


def test_backward_reaches_every_parameter(small_config, make_batch):
    model = DeepSummitTransformer(small_config).train()
    batch = make_batch(small_config, 8)
    batch["numeric_missing"][0] = True  # make sure the missing embeddings are used
    batch["binary_missing"][0] = True
    model(**batch).sum().backward()
    without_grad = [name for name, p in model.named_parameters() if p.grad is None]
    assert without_grad == []


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_forward_backward_under_bf16_autocast(small_config, make_batch):
    torch.manual_seed(0)
    model = DeepSummitTransformer(small_config).cuda().train()
    batch = {key: value.cuda() for key, value in make_batch(small_config, 16).items()}
    labels = torch.randint(0, 2, (16,), device="cuda").float()

    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(**batch)  # (B, k): one logit per ensemble member
        loss = torch.nn.functional.binary_cross_entropy_with_logits(
            logits.float(), labels[:, None].expand_as(logits)
        )
    loss.backward()

    assert logits.shape == (16, small_config.ensemble_size)
    assert torch.isfinite(loss)
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())

    model.eval()
    with torch.no_grad():
        cpu_model = DeepSummitTransformer(small_config).eval()
        cpu_model.load_state_dict(model.state_dict())
        cpu_logits = cpu_model(**{key: value.cpu() for key, value in batch.items()})
        torch.testing.assert_close(model(**batch).cpu(), cpu_logits, atol=1e-4, rtol=1e-4)


def test_a_batch_without_weather_skips_its_positions_for_the_same_logits(small_config, make_batch):
    """No row with any weather: the encoder runs on CLS and the tabular tokens alone, and the
    logits are those of the full sequence with every weather key masked."""
    torch.manual_seed(0)
    model = DeepSummitTransformer(small_config).eval()
    batch = make_batch(small_config, 4)
    batch["weather_missing"][:] = True
    captured = {}
    model.encoder.register_forward_hook(lambda _m, args, _o: captured.update(sequence=args[0]))

    short = model(**batch)
    assert captured["sequence"].shape == (4, 1 + small_config.n_tabular_tokens, 16)
    full, _ = model(**batch, return_attention=True)  # the full sequence, weather masked
    assert captured["sequence"].shape == (4, 47, 16)
    torch.testing.assert_close(short, full, atol=1e-6, rtol=1e-5)


def test_ensemble_members_answer_apart_and_learn_apart(small_config, make_batch):
    torch.manual_seed(0)
    config = dataclasses.replace(small_config, ensemble_size=4, ensemble_layers=1)
    model = DeepSummitTransformer(config).train()
    batch = make_batch(config, 6)
    logits = model(**batch)
    assert logits.shape == (6, 4)  # (B, k)
    assert logits.std(dim=1).min() > 0  # the members differ from the first step
    logits[:, 2].sum().backward()  # member 2's loss moves member 2's adapters only
    last = model.encoder.blocks[-1].ffn.gate_proj
    assert torch.count_nonzero(last.output_scale.grad[2]) > 0
    assert torch.count_nonzero(last.output_scale.grad[[0, 1, 3]]) == 0
