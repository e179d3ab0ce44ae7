"""assemble_batch and assemble_pack + collate_packs give the same batch or the same refusal: the cases a break
test found (row-shaped columns, (L, 1) columns, pad_values, pad ids, generators, aliasing), with exact values,
and a differential hypothesis test over valid and invalid input alike."""

from __future__ import annotations

import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from packwise.assemble import PackedSequence, assemble_batch, assemble_pack, collate_packs
from packwise.hf import PackedDataCollator

from .test_fused import assert_same, reference


def outcome(fn):
    """The batch, or ``(error type, message)``."""
    try:
        return fn()
    except (ValueError, TypeError) as e:
        return type(e), str(e)


def assert_same_outcome(packs, **opts):
    want = outcome(lambda: reference(packs, **opts))
    got = outcome(lambda: assemble_batch(packs, **opts))
    if isinstance(want, tuple) or isinstance(got, tuple):
        assert got == want
    else:
        assert_same(got, want)
    return got


ROW = "sequence 0: input_ids has shape (1, 4); expected (L,) — one sequence"


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.uint8])
@pytest.mark.parametrize("opts", [{}, {"alignment": 8}, {"pad_to": 8}, {"pad_to_multiple_of": 8}])
def test_row_shaped_ids_are_refused_on_both_paths(dtype, opts):
    packs = [[{"input_ids": torch.tensor([[1, 2, 3, 4]], dtype=dtype)}]]
    assert assert_same_outcome(packs, **opts) == (ValueError, ROW)


def test_row_shaped_side_column_is_refused_on_both_paths():
    packs = [[{"input_ids": torch.tensor([1, 2, 3]), "token_type_ids": torch.ones(1, 3, dtype=torch.int64)}]]
    want = (ValueError, "sequence 0: column 'token_type_ids' has 1 tokens but input_ids has 3")
    for opts in ({}, {"pad_to": 4}, {"alignment": 8}, {"pad_to_multiple_of": 4}):
        assert assert_same_outcome(packs, **opts) == want


@pytest.mark.parametrize("opts", [{}, {"alignment": 8}])
def test_collator_refuses_row_shaped_ids_whatever_the_alignment(opts):
    with pytest.raises(ValueError) as e:
        PackedDataCollator(**opts)([{"input_ids": torch.tensor([[5, 6, 7]])}])
    assert str(e.value) == "sequence 0: input_ids has shape (1, 3); expected (L,) — one sequence"


def test_one_token_column_keeps_its_trailing_dim():
    packs = [[{"input_ids": torch.tensor([1]), "xcol": torch.ones(1, 1, dtype=torch.int64)}]]
    got = assert_same_outcome(packs, alignment=8)
    assert tuple(got["xcol"].shape) == (1, 8, 1)
    assert got["xcol"].tolist() == [[[1], [0], [0], [0], [0], [0], [0], [0]]]


def test_a_label_pad_value_is_refused_on_both_paths():
    packs = [[{"input_ids": torch.tensor([1, 2, 3])}]]
    kind, msg = assert_same_outcome(packs, pad_values={"labels": 7}, pad_to_multiple_of=4)
    assert kind is ValueError
    assert msg.startswith("pad_values['labels']=7: padding labels are always -100") and "drop 'labels'" in msg
    got = assert_same_outcome(packs, pad_values={"labels": -100}, pad_to_multiple_of=4)
    assert got["labels"].tolist() == [[-100, 2, 3, -100]]


@pytest.mark.parametrize(
    ("pad_values", "match"),
    [
        ({"input_ids": 5}, "pad_values\\['input_ids'\\]=5 differs from pad_token_id=0"),
        ({"padding_mask": False}, "packwise produces 'padding_mask'"),
        ({"position_ids": 9}, "packwise produces 'position_ids'"),
        ({"loss_mask": 1}, "padding never carries loss"),
        ({"x": "a"}, "a pad value is a number"),
    ],
)
def test_pad_values_for_what_packwise_pads_are_refused(pad_values, match):
    packs = [[{"input_ids": torch.tensor([1, 2, 3])}]]
    kind, msg = assert_same_outcome(packs, pad_values=pad_values, pad_to_multiple_of=4)
    assert kind in (ValueError, TypeError)
    assert re.search(match, msg), msg
    assert assemble_batch(packs, pad_values={"input_ids": 0}, pad_to_multiple_of=4)["input_ids"].tolist() == [
        [1, 2, 3, 0]
    ]


def test_a_generator_of_packs_is_read_once():
    want = assemble_batch([[{"input_ids": torch.tensor([1, 2, 3])}], [{"input_ids": torch.tensor([4])}]])
    got = assemble_batch(p for p in [[{"input_ids": torch.tensor([1, 2, 3])}], [{"input_ids": torch.tensor([4])}]])
    assert got["input_ids"].tolist() == [[1, 2, 3, 4]]
    assert_same(got, want)
    with pytest.raises(TypeError, match="packs is a int; pass a sequence of packs"):
        assemble_batch(5)


def test_pad_token_id_beyond_int64_is_named():
    packs = [[{"input_ids": torch.tensor([1, 2, 3])}]]
    kind, msg = assert_same_outcome(packs, pad_token_id=2**63, pad_to_multiple_of=4)
    assert kind is ValueError
    assert msg.startswith("pad_token_id=9223372036854775808 does not fit int64 [-9223372036854775808, ")
    with pytest.raises(ValueError, match="pad_token_id=9223372036854775808 does not fit int64"):
        collate_packs([assemble_pack(packs[0])], pad_token_id=2**63)


@pytest.mark.parametrize("value", [300, -1, 1.5, float("nan")])
@pytest.mark.parametrize("opts", [{"alignment": 4}, {"pad_to_multiple_of": 4}, {}])
def test_a_pad_value_outside_the_column_dtype_is_named(value, opts):
    """Refused whether or not this batch needs padding: a wrong setting fails on the first batch."""
    packs = [[{"input_ids": torch.tensor([1, 2, 3]), "tt": torch.tensor([1, 0, 1], dtype=torch.uint8)}]]
    kind, msg = assert_same_outcome(packs, pad_values={"tt": value}, **opts)
    assert (kind, msg) == (
        ValueError,
        f"pad_values['tt']={value!r} does not fit column 'tt' of dtype torch.uint8 (integers in [0, 255]); give a "
        "pad value the column holds, or store 'tt' in a wider dtype",
    )


@pytest.mark.parametrize(
    ("value", "dtype", "message"),
    [
        (
            1e6,
            torch.float16,
            "pad_values['tt']=1000000.0 does not fit column 'tt' of dtype torch.float16 [-65504.0, 65504.0]",
        ),
        (2**1100, torch.float32, "does not fit column 'tt' of dtype torch.float32 [-3.4028234663852886e+38, "),
        (2, torch.bool, "pad_values['tt']=2 does not fit column 'tt' of dtype bool (0 or 1)"),
    ],
)
def test_float_and_bool_columns_take_what_they_hold(value, dtype, message):
    packs = [[{"input_ids": torch.tensor([1, 2, 3]), "tt": torch.tensor([1, 0, 1]).to(dtype)}]]
    kind, msg = assert_same_outcome(packs, pad_values={"tt": value}, pad_to_multiple_of=4)
    assert kind is ValueError and message in msg
    for ok in (float("inf"), -1.5):  # (NaN fits too; torch.equal cannot compare it)
        if dtype.is_floating_point:
            got = assert_same_outcome(packs, pad_values={"tt": ok}, pad_to_multiple_of=4)
            assert got["tt"][0, 3].item() == ok


def test_a_pad_value_must_fit_every_sequence_of_a_column():
    """uint8 in one sequence, int64 in another: 300 would fit the promoted column, not the uint8 sequence."""
    packs = [
        [{"input_ids": torch.tensor([1, 2]), "tt": torch.tensor([1, 0], dtype=torch.uint8)}],
        [{"input_ids": torch.tensor([3]), "tt": torch.tensor([4])}],
    ]
    kind, msg = assert_same_outcome(packs, pad_values={"tt": 300}, pad_to_multiple_of=4)
    assert kind is ValueError and msg.startswith("pad_values['tt']=300 does not fit column 'tt' of dtype torch.uint8")
    packs[0].append(packs[1].pop())
    del packs[1]
    assert assert_same_outcome(packs, pad_values={"tt": 300}, pad_to_multiple_of=4)[0] is ValueError
    got = assert_same_outcome(packs, pad_values={"tt": 200}, pad_to_multiple_of=4)
    assert got["tt"].tolist() == [[1, 0, 4, 200]]


def test_a_one_sequence_pack_copies_the_callers_ids():
    t = torch.tensor([1, 2, 3, 4, 5, 6])
    strided = t[::2]
    for batch in (collate_packs([assemble_pack([{"input_ids": strided}])]), assemble_batch([[{"input_ids": strided}]])):
        assert batch["input_ids"].is_contiguous() and batch["input_ids"].stride() == (3, 1)
        batch["input_ids"][0, 0] = 99
        assert t.tolist() == [1, 2, 3, 4, 5, 6]
    pack = assemble_pack([{"input_ids": t}])
    pack.input_ids[0] = 99
    assert t.tolist() == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("option", ["pad_token_id", "label_pad_id", "position_offset"])
@pytest.mark.parametrize("value", [1.5, True, "0", None])
def test_non_integer_ids_and_offsets_are_refused_by_name(option, value):
    packs = [[{"input_ids": torch.tensor([1, 2, 3])}]]
    kind, msg = assert_same_outcome(packs, **{option: value})
    assert (kind, msg) == (
        TypeError,
        f"{option}={value!r} is a {type(value).__name__}; give an integer (a token id, label or position)",
    )


def test_from_flat_and_collate_check_their_integer_options():
    with pytest.raises(TypeError, match=r"position_offset=1\.5 is a float"):
        PackedSequence.from_flat({"input_ids": torch.tensor([1, 2])}, [0, 2], position_offset=1.5)
    with pytest.raises(TypeError, match=r"pad_token_id=1\.5 is a float"):
        collate_packs([assemble_pack([{"input_ids": [1, 2]}])], pad_token_id=1.5)


@st.composite
def any_batches(draw):
    """Batches valid and invalid alike: ids of every integer dtype, row-shaped (1, L) ids or columns, (L, 1)
    columns (one token too), uint8/bool columns, pad values in and out of range, a label pad value."""
    ids_dtype = draw(st.sampled_from([torch.int64, torch.int32, torch.int16, torch.uint8]))
    column = draw(st.sampled_from([None, torch.int64, torch.uint8, torch.bool, torch.float32]))
    shape = draw(st.sampled_from(["flat", "flat", "row_ids", "row_column", "trailing"]))
    packs = []
    for _ in range(draw(st.integers(1, 3))):
        pack = []
        for _ in range(draw(st.integers(1, 3))):
            n = draw(st.integers(1, 5))
            ids = torch.tensor(draw(st.lists(st.integers(0, 200), min_size=n, max_size=n)), dtype=ids_dtype)
            s = {"input_ids": ids[None] if shape == "row_ids" else ids}
            if draw(st.booleans()):
                s["labels"] = ids.to(torch.int64).masked_fill(torch.arange(n) % 2 == 0, -100)
            if column is not None:
                col = (torch.arange(n) % 2).to(column)
                s["mm_token_type_ids"] = (
                    col[None] if shape == "row_column" else col[:, None] if shape == "trailing" else col
                )
            pack.append(s)
        packs.append(pack)
    opts = {
        "alignment": draw(st.sampled_from([1, 1, 8])),
        "pad_to_multiple_of": draw(st.sampled_from([1, 1, 4])),
        "pad_token_id": draw(st.sampled_from([0, 0, 7, 2**63, 1.5])),
    }
    if draw(st.booleans()):
        opts["pad_to"] = 32
    pad_values = draw(
        st.dictionaries(st.sampled_from(["mm_token_type_ids", "labels"]), st.sampled_from([1, 3, 300, -1, -100]))
    )
    if pad_values:
        opts["pad_values"] = pad_values
    return packs, opts


@settings(max_examples=300, deadline=None)
@given(case=any_batches())
def test_fused_gives_the_two_step_batch_or_the_same_refusal(case):
    packs, opts = case
    assert_same_outcome(packs, **opts)


@pytest.mark.parametrize("label_pad_id", [0, 7])
def test_a_label_pad_id_that_is_a_token_id_is_refused_on_both_paths(label_pad_id):
    pack = [{"input_ids": torch.tensor([1, 2, 3])}]
    message = f"label_pad_id={label_pad_id} is a token id"
    with pytest.raises(ValueError, match=message):
        assemble_pack(pack, label_pad_id=label_pad_id)
    with pytest.raises(ValueError, match=message):
        assemble_batch([pack], label_pad_id=label_pad_id)
