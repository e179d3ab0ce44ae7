"""collate_packs: columns decided over the whole batch, permutation invariance, HF keys, layouts."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from packwise.assemble import (
    assemble_pack,
    collate_packs,
    shard_for_context_parallel,
    shift_labels,
    unshard_context_parallel,
)

X = -100


def test_text_only_pack_first_still_gives_a_tensor_column():
    # The seed's bug: a text-only pack first in the batch turned mm_token_type_ids into a list.
    text = assemble_pack([{"input_ids": [1, 2, 3]}])
    image = assemble_pack([{"input_ids": [4, 5], "mm_token_type_ids": torch.tensor([1, 1])}])
    for packs in ([text, image], [image, text]):
        batch = collate_packs(packs)
        assert isinstance(batch["mm_token_type_ids"], torch.Tensor)
        assert batch["mm_token_type_ids"].shape == (1, 5)
    assert collate_packs([text, image])["mm_token_type_ids"].tolist() == [[0, 0, 0, 1, 1]]


def test_thd_keys_for_hf_and_megatron():
    a = assemble_pack([{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5]}])
    b = assemble_pack([{"input_ids": [6] * 5}], alignment=4, pad_to=12)
    batch = collate_packs([a, b])
    assert batch["input_ids"].shape == (1, 17)
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1] + list(range(8)) + [0, 1, 2, 3]]
    # segments: 3, 2 | 5 (padded to 8), tail 4 (real 0)
    assert batch["cu_seqlens"].tolist() == [0, 3, 5, 10, 10]
    assert batch["cu_seqlens_padded"].tolist() == [0, 3, 5, 13, 17]
    assert batch["cu_seq_lens_q"].tolist() == [0, 3, 5, 13, 17] and batch["cu_seq_lens_q"].dtype == torch.int32
    assert (batch["max_length_q"], batch["max_length_k"], batch["max_seqlen"]) == (8, 8, 5)
    assert isinstance(batch["max_length_q"], int)
    assert batch["seq_idx"].tolist() == [[0, 0, 0, 1, 1] + [2] * 8 + [3] * 4]
    assert batch["num_sequences"].tolist() == [2, 1]
    assert batch["cu_pack_tokens"].tolist() == [0, 5, 17]
    assert "attention_mask" not in batch


def test_pad_to_multiple_of_adds_one_tail_segment():
    batch = collate_packs([assemble_pack([{"input_ids": [1, 2, 3]}])], pad_to_multiple_of=8)
    assert batch["input_ids"].tolist() == [[1, 2, 3, 0, 0, 0, 0, 0]]
    assert batch["labels"].tolist() == [[X, 2, 3, X, X, X, X, X]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1, 2, 3, 4]]
    assert batch["cu_seqlens_padded"].tolist() == [0, 3, 8]


def test_padded_layout():
    a = assemble_pack([{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5]}])
    b = assemble_pack([{"input_ids": [6, 7]}])
    batch = collate_packs([a, b], layout="padded")
    assert batch["input_ids"].tolist() == [[1, 2, 3, 4, 5], [6, 7, 0, 0, 0]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1], [0, 1, 0, 1, 2]]
    assert batch["cu_seqlens"].tolist() == [[0, 3, 5], [0, 2, 2]]
    assert batch["cu_seqlens_padded"].tolist() == [[0, 3, 5], [0, 2, 5]]
    assert batch["cu_seq_lens_q"].tolist() == [0, 3, 5, 7, 10]  # flattened [P*S] tokens
    assert batch["seq_idx"].tolist() == [[0, 0, 0, 1, 1], [0, 0, 1, 1, 1]]


def test_mirrored_side_column_stays_aligned_through_every_transform():
    seqs = [{"input_ids": list(range(1, n + 1)), "mirror": [-t for t in range(1, n + 1)]} for n in (5, 3, 8)]
    pack = assemble_pack(seqs, alignment=4, pad_to=24, pad_values={"mirror": 0})
    batch = collate_packs([pack, assemble_pack(seqs[:1], alignment=4)], pad_to_multiple_of=4)
    ids, mirror = batch["input_ids"], batch["mirror"]
    assert torch.equal(mirror, -ids)  # pad 0 on both
    for cp in (2,):
        shards = [shard_for_context_parallel(batch, cp_size=cp, cp_rank=r) for r in range(cp)]
        for s in shards:
            assert torch.equal(s["mirror"], -s["input_ids"])
        assert torch.equal(unshard_context_parallel(shards)["mirror"], mirror)


@st.composite
def random_packs(draw):
    specs = {
        "a": ((), torch.int64),
        "b": ((2,), torch.float32),
        "c": ((2, 3), torch.bool),
    }
    packs = []
    for _ in range(draw(st.integers(1, 4))):
        present = [k for k in specs if draw(st.booleans())]
        n_seq = draw(st.integers(1, 3))
        seqs = []
        for _ in range(n_seq):
            n = draw(st.integers(1, 6))
            seq = {"input_ids": torch.randint(1, 100, (n,))}
            for k in present:
                shape, dtype = specs[k]
                seq[k] = (
                    (torch.rand(n, *shape) > 0.5).to(dtype)
                    if dtype == torch.bool
                    else torch.randint(-9, 9, (n, *shape)).to(dtype)
                )
            seqs.append(seq)
        align = draw(st.sampled_from([1, 2, 4]))
        packs.append(assemble_pack(seqs, alignment=align))
    return packs


def _pack_slices(batch, n_packs):
    off = batch["cu_pack_tokens"].tolist()
    out = []
    for p in range(n_packs):
        sl = {k: v[0, off[p] : off[p + 1]] for k, v in batch.items() if isinstance(v, torch.Tensor) and v.dim() >= 2}
        sl["seq_idx"] = sl["seq_idx"] - sl["seq_idx"][0]  # segment numbers are batch-global; compare relative
        out.append(sl)
    return out


@settings(max_examples=60, deadline=None)
@given(packs=random_packs())
def test_every_pack_slice_is_permutation_invariant(packs):
    base = _pack_slices(collate_packs(packs), len(packs))
    for perm in itertools.permutations(range(len(packs))):
        got = _pack_slices(collate_packs([packs[i] for i in perm]), len(packs))
        for pos, i in enumerate(perm):
            assert base[i].keys() == got[pos].keys()
            for k in base[i]:
                assert torch.equal(base[i][k], got[pos][k]), k


@settings(max_examples=60, deadline=None)
@given(packs=random_packs())
def test_batch_invariants(packs):
    batch = collate_packs(packs)
    cu = batch["cu_seqlens_padded"]
    assert (cu.diff() > 0).all()  # physical segments strictly increasing, tiling every token
    assert int(cu[-1]) == batch["input_ids"].shape[1]
    pos, labels, seg = batch["position_ids"][0], batch["labels"][0], batch["seq_idx"][0]
    starts = cu[:-1].long()
    assert (pos[starts] == 0).all()  # positions restart at every segment
    assert (labels[starts] == X).all()  # no label crosses a boundary
    assert (seg.diff() >= 0).all()


@settings(max_examples=40, deadline=None)
@given(packs=random_packs(), cp=st.sampled_from([1, 2, 3, 4]))
def test_cp_shard_unshard_identity(packs, cp):
    seqs = [{"input_ids": p.input_ids[:n]} for p in packs for n in [int(p.lengths[0])]]
    pack = assemble_pack(seqs, alignment=2 * cp)
    batch = collate_packs([pack], pad_to_multiple_of=2 * cp)
    shards = [shard_for_context_parallel(batch, cp_size=cp, cp_rank=r) for r in range(cp)]
    assert all(s["input_ids"].shape[1] == batch["input_ids"].shape[1] // cp for s in shards)
    if cp > 1:  # HF labels are shifted within each document before the split (an HF loss cannot shift a shard)
        assert all(s["labels_shifted"] and torch.equal(s["shift_labels"], s["labels"]) for s in shards)
        shifted = shift_labels(batch["labels"], batch["seq_idx"])
        assert torch.equal(torch.cat([s["labels"] for s in shards], 1).sort().values, shifted.sort().values)
    back = unshard_context_parallel(shards)  # the exact inverse: the HF labels come back unshifted
    assert back.keys() == batch.keys()
    for k, v in batch.items():
        assert torch.equal(back[k], v) if isinstance(v, torch.Tensor) else back[k] == v, k


def test_cp_zigzag_golden_and_error():
    batch = collate_packs([assemble_pack([{"input_ids": list(range(8))}, {"input_ids": list(range(10, 14))}])])
    # segment 0 (8 tokens, cp=2): chunks of 2 -> rank 0 keeps chunks 0 and 3, rank 1 chunks 1 and 2
    assert shard_for_context_parallel(batch, cp_size=2, cp_rank=0)["input_ids"].tolist() == [[0, 1, 6, 7, 10, 13]]
    assert shard_for_context_parallel(batch, cp_size=2, cp_rank=1)["input_ids"].tolist() == [[2, 3, 4, 5, 11, 12]]
    bad = collate_packs([assemble_pack([{"input_ids": list(range(6))}])])
    with pytest.raises(
        ValueError, match=r"segment 0 .* has 6 tokens, not divisible by 2\*cp_size=4; .*alignment_multiple\(cp=2\)"
    ):
        shard_for_context_parallel(bad, cp_size=2, cp_rank=0)


def test_collate_errors():
    with pytest.raises(ValueError, match="at least one pack"):
        collate_packs([])
    a = assemble_pack([{"input_ids": [1], "x": torch.zeros(1, 2)}])
    b = assemble_pack([{"input_ids": [1], "x": torch.zeros(1, 3)}])
    with pytest.raises(ValueError, match=r"column 'x': per-token shape \(3,\) in pack 1 differs from \(2,\)"):
        collate_packs([a, b])
