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
    assert p.labels.tolist() == [1, 2, 3, 4, 5]  # labels="shifted" (Bridge's contract): as given
    assert p.position_ids.shape == (3, 5) and p.position_ids[0].tolist() == [0, 1, 0, 1, 2]
    assert p.cu_seqlens.tolist() == [0, 2, 5]
    assert flatten_padded_batch(batch, lengths=[2, 3], labels="hf").labels.tolist() == [X, 2, X, 4, 5]


def test_flatten_meets_bridge_pack_language_shard_contract():
    """Megatron-shifted labels [12, 13, X | 22, X] keep every real target; loss_mask is packed (pad 0)."""
    batch = {
        "input_ids": torch.tensor([[11, 12, 13, 0], [21, 22, 0, 0]]),
        "labels": torch.tensor([[12, 13, X, X], [22, X, X, X]]),
        "loss_mask": torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]),
        "position_ids": torch.tensor([[0, 1, 2, 3], [0, 1, 2, 3]]),
    }
    p = flatten_padded_batch(batch, lengths=[3, 2])
    assert p.labels.tolist() == [12, 13, X, 22, X] and p.labels_shifted
    assert p.columns["loss_mask"].tolist() == [1.0, 1.0, 0.0, 1.0, 0.0]
    assert p.position_ids.tolist() == [0, 1, 2, 0, 1] and p.cu_seqlens.tolist() == [0, 3, 5]
    out = collate_packs([p], pad_to_multiple_of=8)  # the packed loss mask pads with 0, labels with -100
    assert out["tokens"].tolist() == [[11, 12, 13, 21, 22, 0, 0, 0]] and "input_ids" not in out
    assert out["labels"].tolist() == [[12, 13, X, 22, X, X, X, X]]
    assert out["loss_mask"].tolist() == [[1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]]
    assert out["labels_shifted"] is True
    # the old behaviour (an HF-style first-label mask) lost the targets 12 and 22
    assert flatten_padded_batch(batch, lengths=[3, 2], labels="hf").labels.tolist() == [X, 13, X, X, X]


def test_flatten_without_input_ids_is_a_label_only_pipeline_stage():
    p = flatten_padded_batch(
        {"labels": torch.tensor([[7, 8, X], [9, X, X]]), "loss_mask": torch.tensor([[1, 1, 0], [1, 0, 0]])},
        lengths=[2, 1],
    )
    assert p.input_ids is None and p.labels.tolist() == [7, 8, 9] and p.total_tokens == 3
    out = collate_packs([p])
    assert out["tokens"] is None and out["labels"].tolist() == [[7, 8, 9]] and out["loss_mask"].tolist() == [[1, 1, 1]]
    assert flatten_padded_batch({"labels": torch.tensor([[7, 8, X]])}, lengths=[2], labels="hf").labels.tolist() == [
        X,
        8,
    ]


def test_flatten_mrope_positions_3_b_s():
    pos = torch.tensor([[[0, 1, 2], [0, 1, 9]], [[0, 4, 4], [0, 5, 9]], [[0, 6, 6], [0, 7, 9]]])  # [3, B=2, S=3]
    p = flatten_padded_batch({"input_ids": torch.ones(2, 3, dtype=torch.long), "position_ids": pos}, lengths=[3, 2])
    assert p.position_ids.tolist() == [[0, 1, 2, 0, 1], [0, 4, 4, 0, 5], [0, 6, 6, 0, 7]]
    assert collate_packs([p])["position_ids"].shape == (3, 1, 5)


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


def test_packed_seq_params_max_seqlen_is_an_int_from_a_tensor_too():
    batch = collate_packs([assemble_pack([{"input_ids": [1] * 5}, {"input_ids": [2] * 7}], alignment=4)])
    batch["max_length_q"] = torch.tensor([batch["max_length_q"]], dtype=torch.int32)  # after a TP broadcast
    params = to_packed_seq_params(batch)
    got = params["max_seqlen_q"] if isinstance(params, dict) else params.max_seqlen_q
    assert type(got) is int and got == 8
