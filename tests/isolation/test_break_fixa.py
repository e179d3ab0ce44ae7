"""Break-test findings (HF / assemble / loss): each was silent or a crash; each is now right or loud."""

from __future__ import annotations

import pytest
import torch

from packwise.hf import PackedDataCollator


@pytest.mark.parametrize("lengths", [[[3, 2]], torch.tensor([[3, 2]])])
def test_nested_seq_lengths_refused_not_truncated(lengths):
    with pytest.raises(ValueError, match=r"seq_lengths has shape \(1, 2\); it must be 1-D"):
        PackedDataCollator()([{"input_ids": [1, 2, 3, 4, 5], "seq_lengths": lengths}])


def test_flat_seq_lengths_keep_every_token():
    batch = PackedDataCollator()([{"input_ids": [1, 2, 3, 4, 5], "seq_lengths": [3, 2]}])
    assert batch["input_ids"].tolist() == [[1, 2, 3, 4, 5]]
    assert batch["cu_seq_lens_q"].tolist() == [0, 3, 5]


def test_cu_seq_lens_k_differing_from_q_refused_by_the_patched_forward():
    from packwise.hf import use_packed_attention
    from packwise.verify import family_model

    model = use_packed_attention(family_model("llama", 97), backend="sdpa")
    ids, pos = torch.tensor([[5, 6, 7, 8]]), torch.tensor([[0, 1, 0, 1]])
    q, k = torch.tensor([0, 2, 4], dtype=torch.int32), torch.tensor([0, 1, 4], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"cu_seq_lens_k \[0, 1, 4\] differs from cu_seq_lens_q \[0, 2, 4\]"):
        model(input_ids=ids, position_ids=pos, cu_seq_lens_q=q, cu_seq_lens_k=k, use_cache=False)
    with pytest.raises(ValueError, match=r"cu_seq_lens_k \[0, 1, 4\] differs from cu_seq_lens_q None"):
        model(input_ids=ids, position_ids=pos, cu_seq_lens_k=k, use_cache=False)
    with torch.no_grad():  # the same boundaries run
        out = model(input_ids=ids, position_ids=pos, cu_seq_lens_q=q, cu_seq_lens_k=q, max_length_q=2, max_length_k=2)
    assert tuple(out.logits.shape) == (1, 4, 97)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bool])
def test_packed_cross_entropy_refuses_non_integer_labels(dtype):
    from packwise.loss import packed_cross_entropy

    logits = torch.zeros(1, 3, 4)
    labels = torch.tensor([[0.0, 2.7, 1.0]]).to(dtype)
    with pytest.raises(TypeError, match=f"labels has dtype {dtype}; labels are token ids or -100"):
        packed_cross_entropy(logits, labels)
    # integer labels of the same values: log(4) per target, 2 targets
    loss = packed_cross_entropy(logits, torch.tensor([[0, 2, 1]]), reduction="sum")
    assert round(float(loss), 4) == round(2 * float(torch.log(torch.tensor(4.0))), 4)
