import torch
import torch.nn.functional as F

from deepsummit.model.head import ClassificationHead


def test_head_reads_cls_only_and_returns_logits():
    torch.manual_seed(0)
    head = ClassificationHead(hidden_size=8, dropout=0.1).eval()
    encoded = torch.randn(5, 47, 8)

    logits = head(encoded)
    cls = encoded[:, 0, :]  # (B, H)
    expected = F.gelu(cls @ head.dense.weight.T + head.dense.bias) @ head.classifier.weight.T
    expected = (expected + head.classifier.bias).squeeze(-1)

    assert logits.shape == (5,)
    torch.testing.assert_close(logits, expected)
    encoded[:, 1:, :] = 0.0  # other positions do not matter
    torch.testing.assert_close(head(encoded), logits)


def test_head_returns_unbounded_logits_not_probabilities():
    head = ClassificationHead(hidden_size=4, dropout=0.0)
    with torch.no_grad():
        head.classifier.bias.fill_(5.0)
        head.classifier.weight.zero_()
    assert torch.all(head(torch.randn(3, 47, 4)) == 5.0)


def test_members_each_have_their_own_head():
    """With k members the head's maps are EnsembleLinear: row i is member i mod k's logit."""
    torch.manual_seed(0)
    head = ClassificationHead(hidden_size=8, dropout=0.0, members=3).eval()
    encoded = torch.randn(2 * 3, 1, 8)  # (B·k, 1, H)
    logits = head(encoded)
    assert logits.shape == (6,)
    dense, classifier = head.dense, head.classifier
    for member in range(3):
        cls = encoded[member::3, 0]
        hidden = (cls * dense.input_scale[member]) @ dense.weight.T * dense.output_scale[member]
        hidden = F.gelu(hidden + dense.bias[member])
        logit = (hidden * classifier.input_scale[member]) @ classifier.weight.T
        logit = logit * classifier.output_scale[member] + classifier.bias[member]
        torch.testing.assert_close(logits[member::3], logit.squeeze(-1))
