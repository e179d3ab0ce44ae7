"""flatten_padded_batch and to_packed_seq_params (with the real megatron-core when installed)."""

from __future__ import annotations

import pytest
import torch

from packwise.assemble import assemble_pack, collate_packs, flatten_padded_batch, to_packed_seq_params

X = -100


def test_flatten_golden_with_mirrored_column_and_mrope():
    ids = torch.tensor([[1, 2, 0, 0], [3, 4, 5, 0]])
    batch = {
        "input_ids": ids,
        "labels": torch.tensor([[1, 2, X, X], [3, 4, 5, X]]),
        "mirror": -ids,
        "position_ids": torch.stack([torch.arange(4).expand(2, 4)] * 3),
        "attention_mask": torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0]]),
    }
    p = flatten_padded_batch(batch, lengths=[2, 3])
    assert p.input_ids.tolist() == [1, 2, 3, 4, 5]
    assert p.columns["mirror"].tolist() == [-1, -2, -3, -4, -5]
    assert p.labels.tolist() == [X, 2, X, 4, 5]
    assert p.position_ids.shape == (3, 5) and p.position_ids[0].tolist() == [0, 1, 0, 1, 2]
    assert p.cu_seqlens.tolist() == [0, 2, 5]


def test_flatten_without_input_ids():
    p = flatten_padded_batch({"labels": torch.tensor([[7, 8, X], [9, X, X]])}, lengths=[2, 1])
    assert p.input_ids is None and p.labels.tolist() == [X, 8, X] and p.total_tokens == 3


@pytest.mark.parametrize(
    ("batch", "lengths", "message"),
    [
        ({}, [1], "no tensor in the batch"),
        ({"input_ids": torch.zeros(2, 3, dtype=torch.long)}, [0, 0], "total length is 0 tokens"),
        ({"input_ids": torch.zeros(2, 3, dtype=torch.long)}, [4, 1], "lengths must be in [0, 3]"),
        (
            {"input_ids": torch.zeros(2, 3, dtype=torch.long), "labels": torch.zeros(2, 4)},
            [1, 1],
            "batch['labels'] has shape (2, 4)",
        ),
        (
            {"input_ids": torch.ones(2, 3, dtype=torch.long), "attention_mask": torch.tensor([[0, 1, 1], [1, 0, 0]])},
            [2, 1],
            "row 0 is not right-padded",
        ),
    ],
)
def test_flatten_errors(batch, lengths, message):
    with pytest.raises(ValueError) as info:
        flatten_padded_batch(batch, lengths=lengths)
    assert message in str(info.value)


def test_packed_seq_params_from_real_megatron_core():
    pytest.importorskip("megatron.core")
    from megatron.core.packed_seq_params import PackedSeqParams

    batch = collate_packs([assemble_pack([{"input_ids": [1] * 5}, {"input_ids": [2] * 7}], alignment=4)])
    params = to_packed_seq_params(batch)
    assert isinstance(params, PackedSeqParams) and params.qkv_format == "thd"
    assert params.cu_seqlens_q.tolist() == [0, 5, 12] and params.cu_seqlens_kv_padded.tolist() == [0, 8, 16]
    assert params.max_seqlen_q == 8


def test_packed_seq_params_dict_without_megatron(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "megatron.core.packed_seq_params", None)
    params = to_packed_seq_params(assemble_pack([{"input_ids": [1, 2]}]))
    assert params["qkv_format"] == "thd" and params["cu_seqlens_q"].tolist() == [0, 2]
