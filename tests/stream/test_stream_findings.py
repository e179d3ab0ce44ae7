"""Break-test findings on PackingStream: a pack that fails to assemble is not skipped on resume, input_ids that
are not 1-D are refused, and pad_to / alignment / pad_token_id are bounded at construction (exact messages)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from packwise.stream import PackingLoader, PackingStream

BAD = [{"input_ids": [1] * 6}, {"input_ids": [1] * 6, "labels": [1, 2]}, {"input_ids": [1] * 6}]
GOOD = [{"input_ids": [1] * 6}, {"input_ids": [1] * 6, "labels": [1] * 6}, {"input_ids": [1] * 6}]
LABELS_MSG = "sequence 0: column 'labels' has 2 tokens but input_ids has 6"


def _until_error(stream) -> int:
    it, n = iter(stream), 0
    with pytest.raises(ValueError, match=LABELS_MSG):
        while True:
            next(it)
            n += 1
    return n


@pytest.mark.parametrize(("seed", "k"), [(1, 0), (0, 1), (2, 2)])  # the bad pack is first, middle, last
def test_a_pack_that_fails_to_assemble_is_where_the_state_points(seed, k):
    opts = dict(capacity=8, buffer_size=3, shuffle=False, seed=seed)
    stream = PackingStream(BAD, **opts)
    assert _until_error(stream) == k
    state = stream.state_dict()
    assert (state["window"], state["pack"]) == (0, k)  # AT the failing pack, also the window's last (seed 2)
    again = PackingStream(BAD, **opts)
    again.load_state_dict(state)
    with pytest.raises(ValueError, match=LABELS_MSG):  # a resume raises again: nothing is skipped silently
        list(again)
    fixed = PackingStream(GOOD, **opts)  # the data fixed: the resume emits the failed pack and the rest
    fixed.load_state_dict(state)
    whole = list(PackingStream(GOOD, **opts))
    assert [p.labels.tolist() for p in fixed] == [p.labels.tolist() for p in whole[k:]]


def test_closing_after_a_pack_keeps_the_position_past_it():
    stream = PackingStream(GOOD, capacity=8, buffer_size=3, shuffle=False, seed=0)
    it = iter(stream)
    next(it)
    it.close()
    assert (stream.state_dict()["window"], stream.state_dict()["pack"]) == (0, 1)


class _FailingSlices(list):
    """A planned window whose ``fail``-th pack slice raises (an error while slicing with assemble=False)."""

    fail = 1

    def __getitem__(self, index):
        if isinstance(index, slice):
            type(self).calls += 1
            if type(self).calls == self.fail + 1:
                raise RuntimeError("slice failed")
        return super().__getitem__(index)


def test_an_error_while_slicing_without_assembly_leaves_the_state_at_that_pack(monkeypatch):
    plan = PackingStream._plan

    def failing_plan(self, window, base, samples):
        flat, starts, ends = plan(self, window, base, samples)
        return _FailingSlices(flat), starts, ends

    monkeypatch.setattr(PackingStream, "_plan", failing_plan)
    monkeypatch.setattr(_FailingSlices, "calls", 0, raising=False)
    stream = PackingStream(GOOD, capacity=8, buffer_size=3, shuffle=False, assemble=False)
    it = iter(stream)
    next(it)
    with pytest.raises(RuntimeError, match="slice failed"):
        next(it)
    assert (stream.state_dict()["window"], stream.state_dict()["pack"]) == (0, 1)


def test_the_loader_position_is_at_the_failing_pack():
    loader = PackingLoader(PackingStream(BAD, capacity=8, buffer_size=3, shuffle=False, seed=2), batch_size=1)
    it, n = iter(loader), 0
    with pytest.raises(ValueError, match=LABELS_MSG):
        while True:
            next(it)
            n += 1
    assert n == 2 and (loader.state_dict()["window"], loader.state_dict()["pack"]) == (0, 2)


@pytest.mark.parametrize("ids", [torch.zeros(1, 300, dtype=torch.long), np.zeros((1, 300), dtype=np.int64)])
def test_input_ids_that_are_not_1d_are_refused_without_assembly(ids):
    samples = [{"input_ids": [1, 2, 3]}, {"input_ids": ids}]
    with pytest.raises(ValueError) as info:
        list(PackingStream(samples, capacity=512, buffer_size=2, shuffle=False, assemble=False))
    assert str(info.value) == (
        "sample 1: input_ids has shape (1, 300) (2-D); input_ids must be 1-D (L,) — flatten it (ids.reshape(-1)) "
        "or drop the batch dim (ids[0])"
    )


def test_1d_arrays_and_lists_still_plan():
    samples = [{"input_ids": torch.ones(3, dtype=torch.long)}, {"input_ids": np.ones(4, np.int64)},
               {"input_ids": (1, 2)}, {"input_ids": [1]}]  # fmt: skip
    packs = list(PackingStream(samples, capacity=10, buffer_size=4, shuffle=False, assemble=False))
    assert sum(len(s["input_ids"]) for p in packs for s in p) == 10


def test_0d_input_ids_are_named_as_0d():
    with pytest.raises(ValueError) as info:
        list(PackingStream([{"input_ids": torch.tensor(5)}], capacity=8, buffer_size=1, assemble=False))
    assert (
        str(info.value) == "sample 0: input_ids has shape () (0-D); input_ids must be 1-D (L,) — wrap a scalar as [id]"
    )


class _Broken(dict):
    def __getitem__(self, key):
        raise RuntimeError("disk gone")


def test_a_sample_whose_getitem_raises_is_named():
    samples = [{"input_ids": [1]}, _Broken(input_ids=[1])]
    with pytest.raises(ValueError) as info:
        list(PackingStream(samples, capacity=8, buffer_size=2, shuffle=False))
    assert str(info.value) == "sample 1: reading its input_ids raised RuntimeError: disk gone"
    assert isinstance(info.value.__cause__, RuntimeError)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"capacity": 4, "pad_to": 16}, "pad_to=16 > capacity=4: every pack would be padded over capacity; pass "
         "pad_to <= capacity (or raise capacity to pad_to)"),
        ({"capacity": 8, "pad_to": 10**30}, "pad_to=1000000000000000000000000000000 is over the limit 2147483647 "
         "(int32 cu_seqlens); pass a smaller pad_to"),
        ({"capacity": 2**40, "alignment": 2**31}, "alignment=2147483648 is over the limit 2147483647 (int32 "
         "cu_seqlens); pass a smaller alignment"),
        ({"capacity": 8, "pad_token_id": -1}, "pad_token_id must be an integer >= 0 (a token id; samples' ids are "
         ">= 0), got -1; use your tokenizer's pad id"),
        ({"capacity": 8, "pad_token_id": True}, "pad_token_id must be an integer >= 0 (a token id; samples' ids "
         "are >= 0), got True; use your tokenizer's pad id"),
    ],
)  # fmt: skip
def test_padding_options_are_bounded_at_construction(options, message):
    with pytest.raises(ValueError) as info:
        PackingStream([{"input_ids": [1, 2]}], buffer_size=1, **options)
    assert str(info.value) == message


def test_pad_to_equal_to_capacity_is_taken():
    pack = next(iter(PackingStream([{"input_ids": [1, 2]}], capacity=16, buffer_size=1, pad_to=16)))
    assert pack.input_ids.numel() == 16
