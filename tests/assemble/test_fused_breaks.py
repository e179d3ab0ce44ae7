"""Break-test findings in the fused assembly: each batch below once made ``assemble_batch`` differ from the
two-step path (``assemble_pack`` + ``collate_packs``) or made both answer with a raw numpy/torch error."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from packwise.assemble import _fused_layout, assemble_batch, assemble_pack, collate_packs
from packwise.assemble._options import MAX_TOKENS

from .test_fused import assert_same, reference


def _both(packs_factory, **kw):
    """The outcome of each path: ``(fused, two-step)``, each a batch or the exception raised."""
    out = []
    for f in (lambda p: assemble_batch(p, **kw), lambda p: reference(p, **kw)):
        try:
            out.append(f(packs_factory()))
        except Exception as e:  # (the outcome is compared)
            out.append(e)
    return out


@pytest.mark.parametrize("kw", [{"alignment": 4}, {"pad_to": 8}, {"pad_to_multiple_of": 4}])
def test_a_float_column_of_mixed_dtypes_is_padded_in_each_packs_dtype(kw):
    # float32 cannot hold 0.1: assemble_pack pads pack 0 in float32 (0.10000000149011612), the fused path once
    # filled every pad in the promoted float64 (0.1)
    packs = [
        [{"input_ids": torch.tensor([1, 2, 3]), "score": torch.tensor([0.5, 0.5, 0.5], dtype=torch.float32)}],
        [{"input_ids": torch.tensor([4, 5]), "score": torch.tensor([0.25, 0.25], dtype=torch.float64)}],
    ]
    got = assemble_batch(packs, pad_values={"score": 0.1}, **kw)
    want = reference(packs, pad_values={"score": 0.1}, **kw)
    assert_same(got, want)
    assert got["score"].dtype == torch.float64
    f32 = float(torch.tensor(0.1, dtype=torch.float32))
    if "alignment" in kw:
        assert got["score"].tolist() == [[0.5, 0.5, 0.5, f32, 0.25, 0.25, 0.1, 0.1]]


@pytest.mark.parametrize("column", ["labels", "mm"])
@pytest.mark.parametrize("kw", [{}, {"alignment": 4}, {"pad_to_multiple_of": 4}])
def test_a_column_on_another_device_than_input_ids_raises_as_the_two_step_path(column, kw):
    # the fused path read only input_ids[0].device: a meta column came back as zeros (labels all -100)
    def packs():
        return [[{"input_ids": torch.tensor([1, 2, 3]), column: torch.tensor([1, 2, 3], device="meta")}]]

    fused, two = _both(packs, **kw)
    assert isinstance(two, NotImplementedError)
    assert type(fused) is type(two) and str(fused) == str(two) == "Cannot copy out of meta tensor; no data!"


def test_input_ids_on_the_meta_device_with_a_cpu_column_give_the_two_step_batch():
    def packs():
        return [[{"input_ids": torch.tensor([1, 2, 3], device="meta"), "mm": torch.tensor([1, 2, 3])}]]

    def kinds(batch):
        return {k: (v.device.type, v.dtype, tuple(v.shape)) if isinstance(v, torch.Tensor) else v
                for k, v in batch.items()}  # fmt: skip

    fused, two = _both(packs)
    assert list(fused) == list(two) and kinds(fused) == kinds(two)
    assert fused["mm"].device.type == "meta" and fused["num_sequences"].device.type == "cpu"


_FIX = "give the model's first position (0 unless it says otherwise)"


@pytest.mark.parametrize(
    ("offset", "why"),
    [
        (-1, "a negative position indexes nothing"),
        (-(2**63), "a negative position indexes nothing"),
        (MAX_TOKENS + 1, "no model has that many positions (and position_offset + a position must fit int64)"),
        (2**63 - 1, "no model has that many positions (and position_offset + a position must fit int64)"),
    ],
)
def test_position_offset_outside_0_to_max_tokens_is_refused_by_both_paths(offset, why):
    packs = [[{"input_ids": torch.tensor([1, 2, 3])}]]
    want = (
        f"position_offset={offset} is outside [0, 2147483647]: positions index the model's position table, which "
        f"starts at 0 (HF, Megatron; 2 for RoBERTa-style models); {why}; {_FIX}"
    )
    for call in (lambda: assemble_batch(packs, position_offset=offset),
                 lambda: assemble_pack(packs[0], position_offset=offset)):  # fmt: skip
        with pytest.raises(ValueError) as e:
            call()
        assert str(e.value) == want


def test_the_largest_position_offset_counts_on_exactly():
    packs = [[{"input_ids": torch.tensor([1, 2, 3])}], [{"input_ids": torch.tensor([4])}]]
    got = assemble_batch(packs, position_offset=MAX_TOKENS, pad_to_multiple_of=3)
    assert_same(got, reference(packs, position_offset=MAX_TOKENS, pad_to_multiple_of=3))
    m = MAX_TOKENS
    assert got["position_ids"].tolist() == [[m, m + 1, m + 2, m, 0, 1]]


@pytest.mark.parametrize(
    ("option", "value"),
    [("pad_to", 2**40), ("pad_to", 2**31), ("alignment", 2**61), ("alignment", 2**63), ("alignment", 2**31),
     ("pad_to_multiple_of", 2**62), ("pad_to_multiple_of", 2**31 + 1)],
)  # fmt: skip
def test_sizes_beyond_max_tokens_are_refused_by_name_on_both_paths(option, value):
    def packs():
        return [[{"input_ids": torch.tensor([1, 2, 3])}]]

    fused, two = _both(packs, **{option: value})
    want = (
        f"{option}={value} is more than 2147483647 tokens (cu_seqlens are int32, so no row holds more); give at "
        "most 2147483647 (a pack's capacity)"
    )
    for e in (fused, two):
        assert type(e) is ValueError and str(e) == want


@pytest.mark.parametrize("kw", [{}, {"alignment": 4}])
def test_an_integer_pad_value_beyond_int64_on_a_float_column_is_refused_by_both_paths(kw):
    def packs():
        return [[{"input_ids": torch.tensor([1, 2, 3]), "x": torch.tensor([0.5, 0.5, 0.5])}]]

    fused, two = _both(packs, pad_values={"x": 2**70}, **kw)
    want = (
        "pad_values['x']=1180591620717411303424 is an integer beyond int64, which torch cannot fill column 'x' of "
        "dtype torch.float32 with; give it as a float (pad_values['x']=1.1805916207174113e+21)"
    )
    for e in (fused, two):
        assert type(e) is ValueError and str(e) == want
    got = assemble_batch(packs(), pad_values={"x": float(2**70)}, **kw)  # the fix works
    assert_same(got, reference(packs(), pad_values={"x": float(2**70)}, **kw))


def test_collate_packs_refuses_a_huge_multiple_before_allocating():
    with pytest.raises(ValueError, match=r"^pad_to_multiple_of=4611686018427387904 is more than 2147483647 tokens"):
        collate_packs([assemble_pack([{"input_ids": torch.tensor([1, 2])}])], pad_to_multiple_of=2**62)


def test_position_ranges_are_never_short_whichever_cache_a_thread_reads(monkeypatch):
    small = _fused_layout._Ranges(8)
    assert small[20].tolist() == list(range(20))  # beyond the base: a new arange, never base[:20]
    assert 20 not in small
    monkeypatch.setattr(_fused_layout, "_RANGES", _fused_layout._Ranges(8))
    bad = []

    def call(n):
        for _ in range(3):
            if _fused_layout._positions([n, 3], n).shape[0] != n + 3:
                bad.append(n)

    threads = [threading.Thread(target=call, args=(n,)) for n in (500, 7000, 900, 14000, 2000, 30000)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bad == []
    assert _fused_layout._RANGES.base.shape[0] >= 30000
    assert np.array_equal(_fused_layout._positions([3, 30000], 30000)[:4], [0, 1, 2, 0])
