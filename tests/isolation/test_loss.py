"""packed_cross_entropy goldens with uniform logits (every target costs log V)."""

from __future__ import annotations

import math

import pytest
import torch

from packwise.loss import packed_cross_entropy

X = -100
LOG3 = math.log(3)


def test_token_mean_uses_global_count():
    logits = torch.zeros(1, 5, 3)
    labels = torch.tensor([[X, 1, 2, X, 0]])  # 3 targets
    assert packed_cross_entropy(logits, labels).item() == pytest.approx(LOG3)
    assert packed_cross_entropy(logits, labels, num_items=6).item() == pytest.approx(LOG3 / 2)
    assert packed_cross_entropy(logits, labels, reduction="sum").item() == pytest.approx(3 * LOG3)


def test_sequence_mean_averages_documents():
    logits = torch.zeros(6, 3)
    logits[1, 0] = 10.0  # position 1 predicts label[2] = 0 almost surely: loss ~ 0
    labels = torch.tensor([X, 1, 0, X, 2, 2])
    cu = torch.tensor([0, 3, 6])
    token_losses = [LOG3, 0.0, LOG3, LOG3]  # targets at positions 1, 2 (doc 0) and 4, 5 (doc 1)
    expected_tok = (
        token_losses[0] + float(torch.nn.functional.cross_entropy(logits[1:2], torch.tensor([0]))) + 2 * LOG3
    ) / 4
    assert packed_cross_entropy(logits, labels).item() == pytest.approx(expected_tok, rel=1e-5)
    doc0 = (LOG3 + float(torch.nn.functional.cross_entropy(logits[1:2], torch.tensor([0])))) / 2
    expected = pytest.approx((doc0 + LOG3) / 2, rel=1e-5)
    assert packed_cross_entropy(logits, labels, reduction="sequence_mean", cu_seqlens_padded=cu).item() == expected


def test_old_cu_seqlens_keyword_still_works_and_warns():
    """``cu_seqlens=`` was the keyword's name before it became ``cu_seqlens_padded`` (the physical boundaries):
    it still gives the same loss, with a DeprecationWarning; both together are refused."""
    logits, labels, cu = torch.zeros(6, 3), torch.tensor([X, 1, 0, X, 2, 2]), torch.tensor([0, 3, 6])
    new = packed_cross_entropy(logits, labels, reduction="sequence_mean", cu_seqlens_padded=cu)
    with pytest.warns(DeprecationWarning, match="cu_seqlens_padded"):
        old = packed_cross_entropy(logits, labels, reduction="sequence_mean", cu_seqlens=cu)
    assert torch.equal(old, new)
    with pytest.raises(ValueError, match="not both"):
        packed_cross_entropy(logits, labels, reduction="sequence_mean", cu_seqlens=cu, cu_seqlens_padded=cu)


def test_shifted_labels():
    logits = torch.zeros(4, 3)
    assert packed_cross_entropy(logits, torch.tensor([1, 2, X, X]), labels_shifted=True).item() == pytest.approx(LOG3)


def test_errors():
    with pytest.raises(ValueError, match="needs cu_seqlens"):
        packed_cross_entropy(torch.zeros(3, 2), torch.tensor([X, 1, 1]), reduction="sequence_mean")
    with pytest.raises(ValueError, match="unknown reduction"):
        packed_cross_entropy(torch.zeros(3, 2), torch.tensor([X, 1, 1]), reduction="mean")
    with pytest.raises(ValueError, match="must be \\(B, T, V\\)"):
        packed_cross_entropy(torch.zeros(3, 2), torch.tensor([X, 1]))
