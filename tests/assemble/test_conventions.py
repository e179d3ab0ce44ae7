"""Label conventions (HF / Megatron-shifted) through collate, CP sharding, the loss and the stream."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from packwise import PackingConfig
from packwise.assemble import (
    assemble_pack,
    collate_packs,
    cp_indices,
    shift_labels,
    unshift_labels,
)
from packwise.loss import PackedLoss, packed_cross_entropy

X = -100


def test_shifted_collate_golden():
    """Megatron convention: labels shifted within each document (never across), tokens, loss_mask, fixed width."""
    pack = assemble_pack([{"input_ids": [11, 12, 13]}, {"input_ids": [21, 22]}], alignment=2)
    batch = collate_packs([pack], labels="shifted", pack_width=8)
    assert batch["tokens"].tolist() == [[11, 12, 13, 0, 21, 22, 0, 0]] and "input_ids" not in batch
    assert batch["labels"].tolist() == [[12, 13, X, X, 22, X, X, X]]  # 13 and 22 never predict the next doc
    assert batch["loss_mask"].tolist() == [[1, 1, 0, 0, 1, 0, 0, 0]] and batch["loss_mask"].dtype == torch.float32
    assert batch["cu_seqlens"].tolist() == [0, 3, 5, 5] and batch["cu_seqlens_padded"].tolist() == [0, 4, 6, 8]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 3, 0, 1, 0, 1]] and batch["labels_shifted"] is True
    # the same pack assembled shifted gives the same batch; and back to HF is the original
    same = collate_packs([assemble_pack([{"input_ids": [11, 12, 13]}, {"input_ids": [21, 22]}], alignment=2,
                                        labels_shifted=True)], pack_width=8)  # fmt: skip
    assert torch.equal(same["labels"], batch["labels"])
    assert collate_packs([pack], labels="hf")["labels"].tolist() == [[X, 12, 13, X, X, 22]]


def test_collate_options_errors():
    a, b = assemble_pack([{"input_ids": [1, 2]}]), assemble_pack([{"input_ids": [3]}], labels_shifted=True)
    with pytest.raises(ValueError, match="mix label conventions"):
        collate_packs([a, b])
    with pytest.raises(ValueError, match="labels='megatron'"):
        collate_packs([a], labels="megatron")
    with pytest.raises(ValueError, match=r"emit names \['attention_mask'\]"):
        collate_packs([a], emit=("attention_mask",))
    with pytest.raises(ValueError, match="pack 0 holds 2 tokens > pack_width=1"):
        collate_packs([a], pack_width=1)
    mrope = assemble_pack([{"input_ids": [1, 2], "position_ids": [[0, 1], [0, 1], [0, 1]]}])
    with pytest.raises(ValueError, match="mrope=False"):
        collate_packs([mrope], mrope=False)
    assert collate_packs([a], mrope=True)["position_ids"].shape == (3, 1, 2)


@settings(max_examples=30, deadline=None)
@given(lengths=st.lists(st.integers(1, 9), min_size=1, max_size=4), align=st.sampled_from([1, 2, 4]))
def test_shift_roundtrip_and_never_across(lengths, align):
    docs = [{"input_ids": list(range(100 * i + 1, 100 * i + 1 + n))} for i, n in enumerate(lengths)]
    hf = collate_packs([assemble_pack(docs, alignment=align)], pad_to_multiple_of=8)
    shifted = shift_labels(hf["labels"], hf["seq_idx"])
    assert torch.equal(unshift_labels(shifted, hf["seq_idx"]), hf["labels"])
    ids, seg = hf["input_ids"][0], hf["seq_idx"][0]
    for t in torch.nonzero(shifted[0] != X).flatten().tolist():  # every target is the next token, same document
        assert int(shifted[0, t]) == int(ids[t + 1]) and int(seg[t]) == int(seg[t + 1])
    assert int((shifted != X).sum()) == sum(n - 1 for n in lengths)


@pytest.mark.parametrize(("cp", "labels"), [(2, "hf"), (4, "hf"), (2, "shifted")])
def test_cp_sum_of_rank_losses_equals_unsharded_loss(cp, labels):
    """HF labels are shifted before the zigzag split: the ranks' losses add up to the unsharded loss exactly."""
    g = torch.Generator().manual_seed(0)
    docs = [{"input_ids": torch.randint(0, 11, (n,), generator=g)} for n in (13, 6, 22, 9)]
    cfg = PackingConfig(capacity=64, topology={"cp": cp}, labels=labels)
    batch = cfg.collator()([cfg.assemble(docs)])
    logits = torch.randn(1, batch["total_tokens"], 11, generator=g)  # a model's output on the whole pack
    shifted = labels == "shifted"
    full_sum = packed_cross_entropy(logits, batch["labels"], reduction="sum", labels_shifted=shifted)
    n_targets = int((batch["labels"] != X).sum())
    full_mean = packed_cross_entropy(logits, batch["labels"], labels_shifted=shifted)
    ranks, naive, means = 0.0, 0.0, 0.0
    for r in range(cp):
        idx = cp_indices(batch["cu_seqlens_padded"], cp, r)
        shard, rank_logits = cfg.shard(batch, cp_rank=r), logits.index_select(1, idx)
        assert shard["labels_shifted"] and (shifted or torch.equal(shard["shift_labels"], shard["labels"]))
        ranks += float(PackedLoss(reduction="sum", cp_size=cp)(rank_logits, shard))
        means += float(cfg.loss()(rank_logits, shard, num_items=n_targets))
        naive += float(packed_cross_entropy(rank_logits, batch["labels"].index_select(1, idx), reduction="sum"))
    assert ranks == pytest.approx(float(full_sum), rel=1e-5)
    assert means == pytest.approx(float(full_mean), rel=1e-5)
    if not shifted:
        assert abs(naive - float(full_sum)) > 1.0  # splitting unshifted labels pairs tokens with the wrong targets
    with pytest.raises(ValueError, match="needs num_items"):
        cfg.loss()(rank_logits, shard)


def test_stream_emits_the_configured_convention():
    samples = [{"input_ids": list(range(1, n + 1))} for n in (3, 5, 2)]
    cfg = PackingConfig(capacity=8, buffer_size=3, labels="shifted", fixed_width=True, seed=0)
    packs = list(cfg.stream(samples))
    assert all(p.labels_shifted and p.total_tokens == 8 for p in packs)
    for p in packs:
        real = p.labels[~p.padding_mask]
        assert int((real == X).sum()) == p.num_sequences  # exactly the last token of each document
    batch = next(iter(cfg.loader(samples, batch_size=2)))
    assert batch["tokens"].shape == (1, 16) and batch["labels_shifted"]


def test_hf_collator_converts_shifted_packs_back_to_hf_labels():
    from packwise.hf import PackedDataCollator

    shifted = assemble_pack([{"input_ids": [11, 12, 13]}, {"input_ids": [21, 22]}], labels_shifted=True)
    batch = PackedDataCollator()([shifted])
    assert batch["labels"].tolist() == [[X, 12, 13, X, 22]]  # the model shifts: no double shift
