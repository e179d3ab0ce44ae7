"""flatten_padded_batch on every pipeline stage's batch, the context-parallel split and its exact inverse,
and the stream's overflow cutting MRoPE positions given as nested lists."""

from __future__ import annotations

import pytest
import torch

from packwise.assemble import (
    assemble_pack,
    collate_packs,
    flatten_padded_batch,
    shard_for_context_parallel,
    unshard_context_parallel,
)
from packwise.stream import PackingStream


def test_flatten_takes_a_middle_stage_batch_of_positions_only():
    # rows of real lengths 2 and 3 in a [2, 3] batch: Bridge packs the positions of each row's prefix
    p = flatten_padded_batch({"position_ids": torch.tensor([[0, 1, 9], [0, 1, 2]])}, lengths=[2, 3])
    assert p.input_ids is None and p.labels.tolist() == [-100] * 5  # no tokens, no targets on this stage
    assert (p.position_ids.tolist(), p.cu_seqlens.tolist()) == ([0, 1, 0, 1, 2], [0, 2, 5])


def test_flatten_takes_mrope_positions_only_and_reads_the_batch_on_axis_1():
    pos = torch.arange(3).expand(3, 2, 3) + torch.tensor([0, 10, 20])[:, None, None]  # [3, B=2, S=3]
    p = flatten_padded_batch({"position_ids": pos}, lengths=[2, 3])
    assert p.position_ids.tolist() == [[0, 1, 0, 1, 2], [10, 11, 10, 11, 12], [20, 21, 20, 21, 22]]
    assert p.cu_seqlens.tolist() == [0, 2, 5]
    with pytest.raises(ValueError, match=r"lengths has 3 entries for a batch of 2 rows"):
        flatten_padded_batch({"position_ids": pos}, lengths=[2, 3, 1])
    with pytest.raises(ValueError, match=r"position_ids'\] has shape \(4, 2, 3\); expected \[B, S\] or MRoPE"):
        flatten_padded_batch({"position_ids": torch.zeros(4, 2, 3, dtype=torch.long)}, lengths=[2, 3])


def test_flatten_takes_a_loss_mask_only_stage():
    p = flatten_padded_batch({"loss_mask": torch.tensor([[1, 1, 0], [0, 1, 1]])}, lengths=[2, 3])
    assert p.columns["loss_mask"].tolist() == [1, 1, 0, 1, 1] and p.cu_seqlens.tolist() == [0, 2, 5]
    assert p.position_ids.tolist() == [0, 1, 0, 1, 2] and p.labels.tolist() == [-100] * 5


def _hf_batch():
    # documents of 5 and 3 tokens, aligned to 4 (cp=2): segments [0, 8) and [8, 12)
    pack = assemble_pack([{"input_ids": [1, 2, 3, 4, 5]}, {"input_ids": [6, 7, 8]}], alignment=4)
    batch = collate_packs([pack])
    batch["loss_mask"] = (batch["labels"] != -100).to(torch.float32)
    return batch


def test_cp_unshard_is_the_exact_inverse_of_shard_with_hf_labels_and_loss_mask():
    batch = _hf_batch()
    assert batch["labels"].tolist() == [[-100, 2, 3, 4, 5, -100, -100, -100, -100, 7, 8, -100]]
    shards = [shard_for_context_parallel(batch, cp_size=2, cp_rank=r) for r in range(2)]
    # rank 0 keeps chunks 0 and 3 of each segment: tokens 0,1,6,7 and 8,11; labels are shifted first
    assert shards[0]["labels"].tolist() == [[2, 3, -100, -100, 7, -100]]
    assert shards[0]["loss_mask"].tolist() == [[1.0, 1.0, 0.0, 0.0, 1.0, 0.0]]
    back = unshard_context_parallel(shards)
    assert back.keys() == batch.keys() and back["labels_shifted"] is False
    for k, v in batch.items():
        assert torch.equal(back[k], v) if isinstance(v, torch.Tensor) else back[k] == v, k


def test_cp_shard_refuses_hf_labels_it_could_not_give_back():
    batch = _hf_batch()
    batch["labels"] = batch["labels"].clone()
    batch["labels"][0, 8] = 6  # the first token of segment 1 carries a label: an HF loss scores it across documents
    with pytest.raises(ValueError, match=r"labels\[8\] \(the first token of segment 1\) is 6, not -100"):
        shard_for_context_parallel(batch, cp_size=2, cp_rank=0)
    assert shard_for_context_parallel(batch, cp_size=1, cp_rank=0)["labels"][0, 8] == 6  # cp=1: nothing shifted


@pytest.mark.parametrize("policy", ["truncate", "split"])
@pytest.mark.parametrize("kind", ["list", "tensor"])
def test_stream_overflow_cuts_mrope_positions_and_wide_columns_on_the_token_axis(policy, kind):
    def rows(x):
        return x if kind == "list" else torch.tensor(x)

    long = {"input_ids": [1, 2, 3, 4, 5, 6], "position_ids": rows([[0, 1, 2, 3, 4, 5]] * 3),
            "col": rows([[i, -i] for i in range(6)])}  # fmt: skip
    short = {"input_ids": [7, 8], "position_ids": rows([[0, 1]] * 3), "col": rows([[9, 9], [9, 9]])}
    packs = list(PackingStream([long, short], capacity=4, buffer_size=2, overflow=policy, shuffle=False))
    got = sorted((p.input_ids.tolist(), p.position_ids.tolist(), p.columns["col"].tolist()) for p in packs)
    head = ([1, 2, 3, 4], [[0, 1, 2, 3]] * 3, [[0, 0], [1, -1], [2, -2], [3, -3]])
    if policy == "truncate":
        assert got == [head, ([7, 8], [[0, 1]] * 3, [[9, 9], [9, 9]])]
    else:  # the tail piece (tokens 4:6) keeps its given positions and joins the short sample
        assert got == [head, ([5, 6, 7, 8], [[4, 5, 0, 1]] * 3, [[4, -4], [5, -5], [9, 9], [9, 9]])]
