import math

import torch

from deepsummit.model.embeddings import ModalityEmbedding, Time2Vec, modality_ids


def test_time2vec_values_linear_first_then_periodic():
    t2v = Time2Vec(4)
    with torch.no_grad():
        t2v.linear_weight.fill_(2.0)  # ω₀
        t2v.linear_bias.fill_(-1.0)  # φ₀
        t2v.periodic_weights.copy_(torch.tensor([0.5, 1.0, 2 * math.pi / 7]))  # ω₁..ω₃
        t2v.periodic_biases.copy_(torch.tensor([0.0, math.pi / 2, 1.0]))  # φ₁..φ₃
    t = torch.tensor([[0.0, 1.0, 3.5], [7.0, 10.0, 89.0]])  # (B, S) = (2, 3)

    encoding = t2v(t)

    assert encoding.shape == (2, 3, 4)  # (B, S, num_features)
    torch.testing.assert_close(encoding[..., 0], 2.0 * t - 1.0)  # ω₀t + φ₀
    torch.testing.assert_close(encoding[..., 1], torch.sin(0.5 * t))
    torch.testing.assert_close(encoding[..., 2], torch.cos(t))  # sin(t + π/2)
    torch.testing.assert_close(encoding[..., 3], torch.sin(2 * math.pi / 7 * t + 1.0))


def test_time2vec_linear_channel_is_linear_and_periodic_channels_repeat():
    torch.manual_seed(0)
    t2v = Time2Vec(8, period=365.25)
    t = torch.linspace(0, 366, 50).unsqueeze(0)
    linear = t2v(t)[0, :, 0]
    slopes = (linear[1:] - linear[:-1]) / (t[0, 1:] - t[0, :-1])
    torch.testing.assert_close(slopes, torch.full_like(slopes, t2v.linear_weight.item()))

    omega = t2v.periodic_weights.detach()
    shifted = t + 2 * math.pi / omega[0]  # one period of the first periodic channel later
    torch.testing.assert_close(t2v(shifted)[0, :, 1], t2v(t)[0, :, 1], atol=1e-4, rtol=0)
    assert t2v(t)[..., 1:].abs().max() <= 1.0


def test_modality_ids_per_position():
    ids = modality_ids(20, (7, 10, 9))
    assert ids.tolist() == [0] + [1] * 20 + [2] * 7 + [3] * 10 + [4] * 9
    assert ids.dtype == torch.int64


def test_modality_embedding_rows_follow_the_ids():
    modality = ModalityEmbedding(20, (7, 10, 9), hidden_size=8)
    assert modality.embedding.num_embeddings == 5  # Embedding(5, H)
    table = modality.embedding.weight
    out = modality()
    assert out.shape == (47, 8)
    torch.testing.assert_close(out[0], table[0])
    torch.testing.assert_close(out[1:21], table[1].expand(20, 8))
    torch.testing.assert_close(out[21:28], table[2].expand(7, 8))
    torch.testing.assert_close(out[28:38], table[3].expand(10, 8))
    torch.testing.assert_close(out[38:47], table[4].expand(9, 8))
