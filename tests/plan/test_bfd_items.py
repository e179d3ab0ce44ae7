"""The item-level BFD (small inputs, stream windows) gives the histogram engine's plan, element for element."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from packwise.plan import plan_packs
from packwise.plan._bfd_items import ITEM_PATH_MAX, plan_bfd_items
from packwise.plan._engine import HistogramBuilder
from packwise.plan._fit_decreasing import place_decreasing
from tests.plan import reference as ref
from tests.strategies import lengths_and_capacity


def histogram_bfd(lengths, capacity, max_seqs):
    builder = HistogramBuilder(np.asarray(lengths, dtype=np.int64), capacity)
    return builder.finalize(place_decreasing(builder, max_seqs=max_seqs, policy="best"))


def test_golden():
    # C=8, sorted 6,5,4,3,2: 6 and 5 open packs 0 and 1 (free 2, 3); 4 opens pack 2; 3 goes to the
    # tightest fit (pack 1, free 3); 2 to pack 0 (free 2).
    order, offsets = plan_bfd_items(np.array([3, 5, 2, 6, 4]), 8, 1 << 62)
    assert (order.tolist(), offsets.tolist()) == ([3, 2, 1, 0, 4], [0, 2, 4, 5])


@settings(max_examples=300, deadline=None)
@given(case=lengths_and_capacity(max_n=80), max_seqs=st.sampled_from([1, 2, 3, 5, 1 << 62]))
def test_item_path_equals_histogram_engine(case, max_seqs):
    lengths, capacity = case
    costs = np.asarray(lengths, dtype=np.int64)
    order, offsets = plan_bfd_items(costs, capacity, max_seqs)
    h_order, h_offsets = histogram_bfd(costs, capacity, max_seqs)
    assert order.tolist() == h_order.tolist()
    assert offsets.tolist() == h_offsets.tolist()
    expected = ref.fit_decreasing(lengths, capacity, None if max_seqs > 1000 else max_seqs, best=True)
    assert [order[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])] == expected


def test_a_stream_sized_window_matches_and_plan_packs_takes_the_item_path():
    rng = np.random.default_rng(0)
    lengths = np.clip(np.rint(rng.lognormal(6.1, 1.1, 10_000)), 1, 4096).astype(np.int64)
    order, offsets = histogram_bfd(lengths, 4096, 1 << 62)
    plan = plan_packs(lengths, capacity=4096)
    assert lengths.shape[0] <= ITEM_PATH_MAX
    assert np.array_equal(plan.order, order) and np.array_equal(plan.offsets, offsets)
    assert plan.num_packs == 1_866  # = L1 = ceil(sum / C): optimal


@settings(max_examples=300, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 9), min_size=1, max_size=300),
    capacity=st.integers(9, 40),
)
def test_runs_of_equal_lengths_match_item_by_item(lengths, capacity):
    """Many duplicates: the run path places a whole run per pack; the plan is still item-by-item BFD."""
    costs = np.asarray(lengths, dtype=np.int64)
    order, offsets = plan_bfd_items(costs, capacity, 1 << 62)
    h_order, h_offsets = histogram_bfd(costs, capacity, 1 << 62)
    assert order.tolist() == h_order.tolist() and offsets.tolist() == h_offsets.tolist()
    expected = ref.fit_decreasing(lengths, capacity, None, best=True)
    assert [order[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])] == expected


@settings(max_examples=200, deadline=None)
@given(case=lengths_and_capacity(max_n=80), table=st.booleans())
def test_waiting_rooms_by_table_or_bisect_give_the_same_plan(case, table):
    """A room too small for the current length waits under the first run it fits: found by a room -> list table,
    or (first lengths over ``_TABLE_MAX``) by bisect — the plan is the histogram engine's either way."""
    import packwise.plan._bfd_items as items

    lengths, capacity = case
    costs = np.asarray(lengths, dtype=np.int64)
    saved = items._TABLE_MAX
    items._TABLE_MAX = saved if table else 0
    try:
        order, offsets = plan_bfd_items(costs, capacity, 1 << 62)
    finally:
        items._TABLE_MAX = saved
    h_order, h_offsets = histogram_bfd(costs, capacity, 1 << 62)
    assert order.tolist() == h_order.tolist() and offsets.tolist() == h_offsets.tolist()


def test_a_capacity_above_the_table_limit_takes_the_bisect_path():
    """Lengths past ``_TABLE_MAX`` (a 2**20-token capacity): no room table is built; the plan is still BFD."""
    from packwise.plan import plan_window
    from packwise.plan._bfd_items import _TABLE_MAX, _BisectSlots, _wait_slots

    rng = np.random.default_rng(5)
    capacity = 1 << 20
    costs = np.clip(np.rint(rng.lognormal(11.5, 1.2, 3000)), 1, capacity).astype(np.int64)
    small = np.sort(costs[costs <= capacity // 2])[::-1]
    assert small[0] > _TABLE_MAX and isinstance(_wait_slots(small, [[]] * small.shape[0]), _BisectSlots)
    h_order, h_offsets = histogram_bfd(costs, capacity, 1 << 62)
    for order, offsets in (plan_bfd_items(costs, capacity, 1 << 62), plan_window(costs, capacity)):
        assert order.tolist() == h_order.tolist() and offsets.tolist() == h_offsets.tolist()
