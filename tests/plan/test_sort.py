"""``sort_by_length`` is ``np.argsort(lengths, kind="stable")`` on every path (one sort, blocks, 64-bit keys)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packwise.plan._sort as sort_mod
from packwise.plan._sort import sort_by_length


@settings(max_examples=200, deadline=None)
@given(
    capacity=st.integers(1, 300),
    data=st.data(),
    key_bits=st.sampled_from([32, 12, 10]),
    min_block_bits=st.sampled_from([16, 1, 3]),
)
def test_equals_stable_argsort(capacity, data, key_bits, min_block_bits):
    lengths = np.asarray(data.draw(st.lists(st.integers(1, capacity), max_size=200)), dtype=np.int64)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sort_mod, "_KEY_BITS", key_bits)
        mp.setattr(sort_mod, "_MIN_BLOCK_BITS", min_block_bits)
        got, counts = sort_by_length(lengths, capacity)
    assert counts.tolist() == np.bincount(lengths, minlength=capacity + 1).tolist()
    assert got.tolist() == np.argsort(lengths, kind="stable").tolist()


@pytest.mark.parametrize(
    ("n", "capacity", "dtype"),
    [(0, 4096, np.uint32), (1, 1, np.uint32), (1 << 20, 4096, np.uint32), ((1 << 20) + 5, 4096, np.uint32),
     (3 << 16, 1 << 17, np.int64), (100, 1 << 24, np.uint32), (1000, 1 << 24, np.int64)],
)  # fmt: skip
def test_paths_at_their_real_sizes(n, capacity, dtype):
    """1 M lengths at C = 4096 fit one 32-bit sort; one more takes the blocked merge; C > 2**16 64-bit keys."""
    lengths = np.random.default_rng(n).integers(1, capacity + 1, n)
    got, counts = sort_by_length(lengths, capacity)
    assert np.array_equal(counts, np.bincount(lengths, minlength=capacity + 1))
    assert got.dtype == dtype
    assert np.array_equal(got, np.argsort(lengths, kind="stable"))
