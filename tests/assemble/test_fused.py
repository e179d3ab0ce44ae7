"""assemble_batch equals assemble_pack + collate_packs, key for key and bit for bit, on the fused path and off it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import packwise.assemble._fused as fused_module
from packwise.assemble import assemble_batch, assemble_pack, collate_packs

PACK_OPTS = ("pad_to", "alignment", "pad_token_id", "label_pad_id", "pad_values", "labels_shifted", "position_offset")
COLLATE_OPTS = ("pad_to_multiple_of", "pad_values", "pad_token_id", "layout")


def reference(packs, **kw):
    pack_kw = {k: v for k, v in kw.items() if k in PACK_OPTS}
    collate_kw = {k: v for k, v in kw.items() if k in COLLATE_OPTS}
    return collate_packs([assemble_pack(p, **pack_kw) for p in packs], **collate_kw)


def assert_same(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, torch.Tensor):
            assert isinstance(y, torch.Tensor), k
            assert (x.dtype, tuple(x.shape)) == (y.dtype, tuple(y.shape)), k
            assert torch.equal(x, y), (k, x, y)
        else:
            assert x == y, (k, x, y)


@pytest.fixture
def fast_calls(monkeypatch):
    """Count how often the fused path answered (so a test cannot pass by always taking the two-step path)."""
    calls = {"fast": 0, "fallback": 0}
    orig = fused_module._fast_thd

    def counting(*args):
        out = orig(*args)
        calls["fast" if out is not None else "fallback"] += 1
        return out

    monkeypatch.setattr(fused_module, "_fast_thd", counting)
    return calls


def test_exact_values_on_the_fused_path(fast_calls):
    packs = [
        [{"input_ids": torch.tensor([1, 2, 3])}, {"input_ids": torch.tensor([4, 5])}],
        [{"input_ids": torch.tensor([6, 7, 8, 9])}],
    ]
    b = assemble_batch(packs, pad_to_multiple_of=4)
    assert fast_calls == {"fast": 1, "fallback": 0}
    assert b["input_ids"].tolist() == [[1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 0, 0]]
    assert b["labels"].tolist() == [[-100, 2, 3, -100, 5, -100, 7, 8, 9, -100, -100, -100]]
    assert b["position_ids"].tolist() == [[0, 1, 2, 0, 1, 0, 1, 2, 3, 0, 1, 2]]
    assert b["seq_idx"].tolist() == [[0, 0, 0, 1, 1, 2, 2, 2, 2, 3, 3, 3]]
    assert b["cu_seqlens"].tolist() == [0, 3, 5, 9, 9]
    assert b["cu_seq_lens_q"].tolist() == [0, 3, 5, 9, 12]
    assert b["num_sequences"].tolist() == [2, 1]
    assert b["cu_pack_tokens"].tolist() == [0, 5, 9]
    assert (b["max_seqlen"], b["max_length_q"], b["total_tokens"]) == (4, 4, 12)


def test_alignment_and_pad_to_on_the_fused_path(fast_calls):
    packs = [
        [{"input_ids": torch.tensor([1] * 5), "labels": torch.tensor([7] * 5)}, {"input_ids": torch.tensor([2] * 7)}]
    ]
    packs[0][1]["labels"] = torch.tensor([8] * 7)
    b = assemble_batch(packs, alignment=4, pad_to=20)
    assert fast_calls["fast"] == 1
    assert b["padding_mask"].nonzero()[:, 1].tolist() == [5, 6, 7, 15, 16, 17, 18, 19]
    assert b["cu_seqlens_padded"].tolist() == [0, 8, 16, 20]
    assert_same(b, reference(packs, alignment=4, pad_to=20))


@pytest.mark.parametrize(
    "packs",
    [
        [[{"input_ids": [1, 2, 3]}]],  # lists
        [[{"input_ids": np.array([1, 2, 3])}]],  # numpy
        [[{"input_ids": torch.tensor([1, 2]), "loss_mask": torch.tensor([0, 1])}]],
        [[{"input_ids": torch.tensor([1, 2]), "position_ids": torch.tensor([[0, 1]] * 3)}]],  # MRoPE
        [[{"input_ids": torch.tensor([1, 2]), "key": "a"}], [{"input_ids": torch.tensor([3]), "key": "b"}]],
        [[{"input_ids": torch.tensor([1, 2]), "x": torch.zeros(2, 3)}]],  # trailing dims
        [[{"input_ids": torch.tensor([1, 2]), "x": torch.zeros(2)}], [{"input_ids": torch.tensor([3])}]],
    ],
)
def test_off_the_fused_path_the_batch_is_the_two_step_batch(packs, fast_calls):
    assert_same(assemble_batch(packs), reference(packs))
    assert fast_calls["fast"] == 0


@pytest.mark.parametrize(
    ("packs", "error", "match"),
    [
        ([], ValueError, "at least one pack"),
        ([[]], ValueError, "at least one sequence"),
        ([[{"input_ids": torch.tensor([], dtype=torch.int64)}]], ValueError, "sequence 0 is empty"),
        ([[{"input_ids": torch.tensor([1.0, 2.0])}]], TypeError, "token ids are integers"),
        ([[{"input_ids": torch.tensor([1, 2]), "labels": torch.tensor([1])}]], ValueError, "'labels' has 1 tokens"),
        ([[{"input_ids": torch.tensor([1, 2]), "seq_idx": torch.tensor([1, 2])}]], ValueError, "packwise produces"),
        ([[{"input_ids": torch.tensor([[1, 2]])}]], ValueError, "expected \\(L,\\)"),
    ],
)
def test_bad_input_raises_the_two_step_error(packs, error, match):
    with pytest.raises(error, match=match):
        assemble_batch(packs)


def test_pad_to_too_small_raises():
    with pytest.raises(ValueError, match="pad_to=4"):
        assemble_batch([[{"input_ids": torch.tensor([1, 2, 3, 4, 5])}]], pad_to=4)


@st.composite
def batches(draw):
    labels = draw(st.booleans())
    column = draw(st.sampled_from([None, torch.int64, torch.int32, torch.bool, torch.float32, "mixed"]))
    packs = []
    for _ in range(draw(st.integers(1, 4))):
        pack = []
        for _ in range(draw(st.integers(1, 4))):
            n = draw(st.integers(1, 9))
            s = {"input_ids": torch.tensor(draw(st.lists(st.integers(0, 999), min_size=n, max_size=n)))}
            if labels:
                s["labels"] = s["input_ids"].masked_fill(  # HF labels: the token itself or -100
                    torch.tensor(draw(st.lists(st.booleans(), min_size=n, max_size=n))), -100
                )
            if column is not None:
                dtype = draw(st.sampled_from([torch.int32, torch.float64])) if column == "mixed" else column
                s["mm_token_type_ids"] = torch.arange(n).to(dtype)
            pack.append(s)
        packs.append(pack)
    align = draw(st.sampled_from([1, 1, 2, 3, 8]))
    longest = max(sum(-(-len(s["input_ids"]) // align) * align for s in p) for p in packs)
    opts = {
        "alignment": align,
        "pad_to_multiple_of": draw(st.sampled_from([1, 1, 4, 16])),
        "labels_shifted": draw(st.booleans()),
        "position_offset": draw(st.sampled_from([0, 0, 2])),
        "pad_token_id": draw(st.sampled_from([0, 7])),
        "label_pad_id": draw(st.sampled_from([-100, -1])),
    }
    if draw(st.booleans()):
        opts["pad_to"] = longest + draw(st.integers(0, 5))
    if column is not None and draw(st.booleans()):  # (a pad value for a column no sequence carries is refused)
        opts["pad_values"] = {"mm_token_type_ids": 1 if column is torch.bool else 3}  # (a bool column holds 0/1)
    return packs, opts


@settings(max_examples=150, deadline=None)
@given(case=batches())
def test_fused_equals_two_step(case):
    """Random tensors, dtypes (mixed within a column too), alignment, pad_to, shifted labels, offsets: the
    fused path answers every case and matches the two-step batch exactly."""
    packs, opts = case
    calls = {"fast": 0}
    orig = fused_module._fast_thd
    try:

        def counting(*args):
            out = orig(*args)
            calls["fast"] += out is not None
            return out

        fused_module._fast_thd = counting
        out = assemble_batch(packs, **opts)
    finally:
        fused_module._fast_thd = orig
    assert calls["fast"] == (not opts["labels_shifted"])  # the shifted convention takes the two-step path
    assert_same(out, reference(packs, **opts))


def test_padded_layout_is_the_two_step_batch():
    packs = [[{"input_ids": torch.tensor([1, 2, 3])}], [{"input_ids": torch.tensor([4])}]]
    assert_same(assemble_batch(packs, layout="padded"), reference(packs, layout="padded"))


@st.composite
def labelled_batches(draw):
    """Rows whose labels are arbitrary: HF, random, Megatron-shifted (labels[t] == input_ids[t+1]) or mixed."""
    packs = []
    for _ in range(draw(st.integers(1, 3))):
        pack = []
        for _ in range(draw(st.integers(1, 3))):
            n = draw(st.integers(1, 7))
            ids = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
            kind = draw(st.sampled_from(["hf", "random", "shifted"]))
            if kind == "hf":
                lab = list(ids)
            elif kind == "random":
                lab = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
            else:
                lab = ids[1:] + [-100]
            mask = draw(st.lists(st.booleans(), min_size=n, max_size=n))
            lab = [-100 if m else v for v, m in zip(lab, mask)]
            pack.append({"input_ids": torch.tensor(ids), "labels": torch.tensor(lab)})
        packs.append(pack)
    return packs, {"alignment": draw(st.sampled_from([1, 2])), "pad_to_multiple_of": draw(st.sampled_from([1, 4]))}


@settings(max_examples=200, deadline=None)
@given(case=labelled_batches())
def test_label_convention_check_matches_two_step(case):
    """The fused path's vectorised check of labels-only rows refuses exactly what the two-step path refuses."""
    packs, opts = case
    try:
        want = reference(packs, **opts)
    except ValueError as e:
        with pytest.raises(ValueError, match="Megatron-shifted"):
            assemble_batch(packs, **opts)
        assert "Megatron-shifted" in str(e)
        return
    answered = []
    orig = fused_module._fast_thd
    try:
        fused_module._fast_thd = lambda *a: answered.append(out := orig(*a)) or out
        got = assemble_batch(packs, **opts)
    finally:
        fused_module._fast_thd = orig
    assert answered[0] is not None  # accepted rows stay on the fused path
    assert_same(got, want)


@pytest.mark.parametrize(
    ("extra", "error", "match"),
    [
        ({"labels": torch.tensor([1.0, 2.0, 3.0])}, TypeError, "labels has dtype torch.float32"),
        ({"labels": torch.tensor([True, False, True])}, TypeError, "labels has dtype torch.bool"),
        ({"labels": torch.tensor([1, -5, 3])}, ValueError, "labels has -5 at position 1"),
        ({"labels": torch.tensor([1, -1, 3])}, ValueError, "labels has -1 at position 1"),
        ({"attention_mask": torch.tensor([1, 0, 1])}, ValueError, "attention_mask has 0 at position 1"),
    ],
)
def test_fused_path_refuses_what_the_two_step_path_refuses(extra, error, match, fast_calls):
    """Values the two-step path refuses (float/bool labels, a negative label other than -100 and the pad, a
    padded attention_mask) leave the fused path, so assemble_batch raises the two-step error."""
    packs = [[{"input_ids": torch.tensor([1, 2, 3]), **extra}]]
    with pytest.raises(error, match=match):
        reference(packs)
    with pytest.raises(error, match=match):
        assemble_batch(packs)
    assert fast_calls["fast"] == 0


def test_negative_label_at_a_boundary_is_masked_on_both_paths(fast_calls):
    """The two-step path checks labels after the boundary rule, which masks a row's first label: a -5 there
    is accepted, and the fused path gives the same batch."""
    packs = [[{"input_ids": torch.tensor([1, 2, 3]), "labels": torch.tensor([-5, 2, 3])}]]
    packs[0].append({"input_ids": torch.tensor([4, 5]), "labels": torch.tensor([-100, 5])})
    got = assemble_batch(packs, pad_to_multiple_of=4)
    assert fast_calls["fast"] == 1
    assert got["labels"].tolist() == [[-100, 2, 3, -100, 5, -100, -100, -100]]
    assert_same(got, reference(packs, pad_to_multiple_of=4))


def test_two_dimensional_sequences_leave_the_fused_path(fast_calls):
    """Dimensions are checked on each concatenation: (1, L) ids and (L, 1) labels go to the two-step path."""
    with pytest.raises(ValueError, match="expected \\(L,\\)"):
        assemble_batch([[{"input_ids": torch.tensor([[1, 2]])}], [{"input_ids": torch.tensor([[3, 4]])}]])
    packs = [[{"input_ids": torch.tensor([1, 2]), "labels": torch.tensor([[1], [2]])}]]
    assert_same(assemble_batch(packs), reference(packs))
    assert fast_calls["fast"] == 0
