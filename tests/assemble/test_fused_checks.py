"""The fused path's shortcuts answer exactly what their full versions answer: the label-convention probes
against the exact whole-batch test, the common-option check against ``check_options``, a side column of
mixed dtypes (no dtype set read) against the two-step batch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from packwise.assemble import _fused as fused_module
from packwise.assemble import assemble_batch
from packwise.assemble._fused_checks import _rows_look_shifted_exact, labels_refused, rows_look_shifted
from packwise.assemble._options import check_options, plain_options

from .test_fused import assert_same, reference


@st.composite
def rows(draw):
    """A batch of rows (1-token rows first, last and between), labels HF, random, shifted or masked, small
    token alphabet (so probes hit equal neighbours)."""
    lens = draw(st.lists(st.integers(1, 6), min_size=1, max_size=6))
    pad = draw(st.sampled_from([-100, -1]))
    ids, lab = [], []
    for n in lens:
        tok = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
        kind = draw(st.sampled_from(["hf", "random", "shifted", "masked"]))
        if kind == "hf":
            row = list(tok)
        elif kind == "random":
            row = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
        elif kind == "shifted":
            row = tok[1:] + [pad]
        else:  # prompt-masked HF labels: the pad, then the reply
            cut = draw(st.integers(0, n))
            row = [pad] * cut + tok[cut:]
        ids += tok
        lab += row
    cu = np.cumsum([0, *lens])
    dtype = draw(st.sampled_from([np.int32, np.int64]))  # (plain layouts pass int32 starts, padded int64)
    return (
        np.array(lab, dtype=np.int64),
        np.array(ids, dtype=np.int64),
        cu[:-1].astype(dtype),
        cu[1:].astype(dtype),
        pad,
    )


@settings(max_examples=400, deadline=None)
@given(case=rows())
def test_label_probes_answer_what_the_exact_test_answers(case):
    lab, ids, start, stop, pad = case
    assert rows_look_shifted(lab, ids, start, stop, pad) == _rows_look_shifted_exact(lab, ids, start, stop - start, pad)


def test_label_probes_exact_values():
    ids = np.array([3, 4, 5, 9, 6, 7, 8])  # rows [0, 3), [3, 4) (1 token), [4, 7)
    start, stop = np.array([0, 3, 4]), np.array([3, 4, 7])
    assert rows_look_shifted(np.array([4, 5, -100, 9, 7, 8, -100]), ids, start, stop, -100)  # every row shifted
    assert not rows_look_shifted(ids.copy(), ids, start, stop, -100)  # HF: cleared at each row's second-to-last
    masked = np.array([-100, 4, 5, 9, -100, 7, 8])  # prompt-masked HF: cleared at the second-to-last position too
    assert not rows_look_shifted(masked, ids, start, stop, -100)
    # the last target is the next token, the first is not: left by the first probe, cleared by the second
    assert not rows_look_shifted(np.array([9, 5, -100, 9, 1, 8, -100]), ids, start, stop, -100)
    # the first target is the next token, the last is not: cleared by the first probe
    assert not rows_look_shifted(np.array([4, 1, -100, 9, 7, 1, -100]), ids, start, stop, -100)
    one = np.array([7])  # a lone 1-token row: no target, never shifted
    assert not rows_look_shifted(one, one, np.array([0]), np.array([1]), -100)


@pytest.mark.parametrize("multiple", [1, 4])
@pytest.mark.parametrize(
    "labels",
    [[5], [9, 3, -100, 8, -100]],  # a lone 1-token row; 1-token rows first and last around a 3-token row
)
def test_label_probe_edges_through_the_library(labels, multiple):
    """The second-to-last probe of a first 1-token row lands on the batch's last position, of a one-token
    batch nowhere: the fused path answers as the two-step path, on the fused path."""
    n = len(labels)
    ids = torch.tensor([5, 3, 9, 8, 7][:n])
    if n == 1:
        packs = [[{"input_ids": ids, "labels": torch.tensor(labels)}]]
    else:  # rows [0, 1), [1, 4) (its second-to-last label the pad: left by the first probe), [4, 5)
        packs = [[{"input_ids": ids[:1], "labels": torch.tensor(labels[:1])}],
                 [{"input_ids": ids[1:4], "labels": torch.tensor(labels[1:4])},
                  {"input_ids": ids[4:], "labels": torch.tensor(labels[4:])}]]  # fmt: skip
    answered = []
    orig = fused_module._fast_thd
    try:
        fused_module._fast_thd = lambda *a: answered.append(out := orig(*a)) or out
        got = assemble_batch(packs, pad_to_multiple_of=multiple)
    finally:
        fused_module._fast_thd = orig
    assert answered[0] is not None
    assert_same(got, reference(packs, pad_to_multiple_of=multiple))


_VALUES = st.one_of(
    st.integers(-(2**64), 2**64), st.booleans(), st.floats(allow_nan=False), st.none(), st.just(np.int64(3))
)


@settings(max_examples=300, deadline=None)
@given(pad=_VALUES, label_pad=_VALUES, offset=_VALUES, pad_values=st.sampled_from([None, {}, {"x": 1}]))
def test_plain_options_never_accepts_what_check_options_refuses(pad, label_pad, offset, pad_values):
    if not plain_options(pad, label_pad, offset, pad_values):
        return
    assert check_options(pad_token_id=pad, label_pad_id=label_pad, position_offset=offset, pad_values=pad_values) == {}


@pytest.mark.parametrize("pad_values", [None, {"mm": 5}])
@pytest.mark.parametrize("multiple", [1, 4])
def test_a_side_column_of_mixed_dtypes_concatenates_promoted(pad_values, multiple):
    packs = [
        [{"input_ids": torch.tensor([1, 2]), "mm": torch.tensor([1, 2], dtype=torch.int32)}],
        [{"input_ids": torch.tensor([3, 4, 5]), "mm": torch.tensor([0.5, 1.5, 2.5], dtype=torch.float64)}],
    ]
    got = assemble_batch(packs, pad_to_multiple_of=multiple, pad_values=pad_values)
    assert_same(got, reference(packs, pad_to_multiple_of=multiple, pad_values=pad_values))
    fill = [] if multiple == 1 else [(pad_values or {}).get("mm", 0)] * 3
    assert got["mm"].dtype == torch.float64
    assert got["mm"].tolist() == [[1.0, 2.0, 0.5, 1.5, 2.5, *fill]]


def test_positions_come_from_a_cache_that_offsets_and_long_rows_leave_intact():
    short = [[{"input_ids": torch.arange(3)}, {"input_ids": torch.arange(2)}]]
    shifted = assemble_batch(short, position_offset=5)
    assert shifted["position_ids"].tolist() == [[5, 6, 7, 5, 6]]
    assert assemble_batch(short)["position_ids"].tolist() == [[0, 1, 2, 0, 1]]  # the offset touched a copy
    long = [[{"input_ids": torch.ones(9000, dtype=torch.int64)}], [{"input_ids": torch.ones(3, dtype=torch.int64)}]]
    got = assemble_batch(long, pad_to_multiple_of=8)  # longer than the cached range: it grows
    assert_same(got, reference(long, pad_to_multiple_of=8))
    assert got["position_ids"][0, :9003].tolist() == [*range(9000), 0, 1, 2]
    assert assemble_batch(short)["position_ids"].tolist() == [[0, 1, 2, 0, 1]]


@pytest.mark.parametrize(
    ("first", "inner", "refused"),
    [(-200, 2, False), (-5, 2, False), (-100, -5, True), (-200, -300, True), (7, -100, False)],
)
def test_negative_labels_checked_from_the_pre_mask_minimum_match_the_two_step_path(first, inner, refused):
    """A label below the pad on a boundary (masked there) may send the batch to the two-step path, which accepts
    it; a bad label inside a row is refused by both."""
    packs = [[{"input_ids": torch.tensor([1, 2, 3]), "labels": torch.tensor([first, inner, 3])}]]
    packs[0].append({"input_ids": torch.tensor([4, 5]), "labels": torch.tensor([-100, 5])})
    if refused:
        with pytest.raises(ValueError) as want:
            reference(packs)
        with pytest.raises(ValueError) as got:
            assemble_batch(packs)
        assert str(got.value) == str(want.value)
    else:
        assert_same(assemble_batch(packs), reference(packs))


def test_the_cache_of_position_ranges_is_bounded(monkeypatch):
    import packwise.assemble._fused_layout as layout

    monkeypatch.setattr(layout, "_MAX_VIEWS", 3)
    monkeypatch.setattr(layout, "_RANGES", layout._Ranges(16))
    got = layout._positions([5, 1, 4, 2, 3, 5], 5)
    assert got.tolist() == [0, 1, 2, 3, 4, 0, 0, 1, 2, 3, 0, 1, 0, 1, 2, 0, 1, 2, 3, 4]
    assert sorted(layout._RANGES) == [1, 4, 5]


@settings(max_examples=400, deadline=None)
@given(
    values=st.lists(st.sampled_from([-300, -101, -100, -99, -2, -1, 0, 1, 5, 2**62]), min_size=1, max_size=12),
    pad=st.sampled_from([-100, -1, -2, -300]),
)
def test_negative_label_check_is_exact(values, pad):
    """The one-pass largest-negative test and the counts answer exactly "some negative label is neither -100 nor
    the pad", whether the caller passes the minimum or not."""
    lab = np.array(values, dtype=np.int64)
    want = any(v < 0 and v not in (-100, pad) for v in values)
    assert labels_refused(lab, pad) == want
    assert labels_refused(lab, pad, min(values)) == want
