"""The stream's per-window fast paths give the same packs and refuse the same values: ``length_fn=int``/``len``
(exact ints by definition: no pass over the values' types) and the gather of the samples in plan order."""

from __future__ import annotations

import numpy as np
import pytest

from packwise.stream import PackingStream

BAD = "; length_fn must return an int in [1, capacity=8] — the sample's token count (len(sample['input_ids'])); "


def _packs(source, length_fn, **kw):
    return list(
        PackingStream(source, capacity=8, buffer_size=5, shuffle=False, assemble=False, length_fn=length_fn, **kw)
    )


def test_int_and_len_plan_as_an_equivalent_lambda():
    counts = [3, 5, 2, 6, 4, 1, 7, 8, 2, 3, 5]
    # windows [3 5 2 6 4] [1 7 8 2 3] [5], C = 8: BFD packs {6 2} {5 3} {4}, {8} {7 1} {3 2}, {5}; seeded pack order
    expected = [[6, 2], [5, 3], [4], [7, 1], [3, 2], [8], [5]]
    assert _packs(counts, int) == _packs(counts, lambda s: int(s)) == expected
    token_lists = [list(range(n)) for n in counts]
    got = _packs(token_lists, len)
    assert got == _packs(token_lists, lambda s: len(s))
    assert [[len(s) for s in pack] for pack in got] == expected
    assert all(any(s is t for t in token_lists) for pack in got for s in pack)  # the source objects, not copies


@pytest.mark.parametrize(("sample", "shown"), [(0, "0 (int)"), (-3, "-3 (int)"), (True, "1 (int)")])
def test_int_length_fn_still_refuses_a_count_below_one(sample, shown):
    if sample is True:  # int(True) is the int 1: a valid count, not a bool
        assert _packs([3, True, 2], int) == [[3, 2, True]]
        return
    with pytest.raises(ValueError) as info:
        _packs([3, 4, sample, 2], int)
    assert str(info.value) == f"sample 2: length_fn returned {shown}{BAD}a longer count is cut by overflow='truncate'"


def test_int_length_fn_still_refuses_a_count_beyond_int64():
    with pytest.raises(ValueError) as info:
        _packs([3, 2**70], int)
    assert str(info.value).startswith("sample 1: length_fn returned 1180591620717411303424 (int)" + BAD)


def test_len_length_fn_still_refuses_an_empty_sample_and_one_that_under_reports():
    with pytest.raises(ValueError, match=r"^sample 1: length_fn returned 0 \(int\)"):
        _packs([[1, 2], []], len)
    samples = [{"input_ids": [1, 2, 3], "labels": [1, 2, 3]}]  # len(dict) = 2 keys < 3 tokens: under-reports
    with pytest.raises(ValueError, match=r"^sample 0: length_fn says 2 tokens but its input_ids hold 3"):
        _packs(samples, len)


def test_int_over_capacity_is_cut_by_the_overflow_policy():
    with pytest.raises(ValueError, match=r"^sample 1 has 9 tokens > capacity 8; pass overflow="):
        _packs([3, 9], int, overflow="error")
    for overflow in ("truncate", "split"):  # an int sample has no tokens to cut: refused (named), never planned at 9
        with pytest.raises(ValueError) as info:
            _packs([3, 9], int, overflow=overflow)
        assert str(info.value) == (
            f"sample 1 has 9 tokens > capacity 8 but is a int, not a mapping with input_ids, so overflow={overflow!r} "
            "cannot cut it — use overflow='drop' or 'error', or give the stream mappings"
        )
    stream = PackingStream(
        [3, 9], capacity=8, buffer_size=5, shuffle=False, assemble=False, length_fn=int, overflow="drop"
    )
    assert list(stream) == [[3]] and stream.stats["dropped"] == 1 and stream.stats["tokens_dropped"] == 9


def test_a_window_of_one_sample_and_numpy_orders():
    assert _packs([5], int) == [[5]]
    assert _packs(np.array([3, 5, 2]).tolist(), int) == [[2], [5, 3]]
