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
