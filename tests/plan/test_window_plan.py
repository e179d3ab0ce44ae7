"""The stream's window planner gives plan_packs' best-fit-decreasing plan, element for element."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from packwise.plan import plan_packs, plan_window
from packwise.plan._bfd_items import plan_bfd_items
from packwise.plan._engine import HistogramBuilder
from packwise.plan._fit_decreasing import place_decreasing


def _same(costs: np.ndarray, capacity: int) -> None:
    order, offsets = plan_window(costs, capacity)
    ref = plan_packs(costs, capacity=capacity)  # the histogram engine above 50,000 sequences, the item path below
    assert order.tolist() == ref.order.tolist()
    assert offsets.tolist() == ref.offsets.tolist()
    builder = HistogramBuilder(costs, capacity)  # and the histogram engine itself, whatever the size
    h_order, h_offsets = builder.finalize(place_decreasing(builder, max_seqs=1 << 62, policy="best"))
    assert order.tolist() == h_order.tolist() and offsets.tolist() == h_offsets.tolist()


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 64).flatmap(lambda c: st.tuples(st.just(c), st.lists(st.integers(1, c), max_size=80))))
def test_window_plan_is_bfd_small_capacities(case):
    capacity, lengths = case
    _same(np.asarray(lengths, dtype=np.int64), capacity)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(2, 4096).flatmap(
        lambda c: st.tuples(
            st.just(c),
            st.lists(st.integers(c // 6, c // 2 + 1).map(lambda x: max(1, x)), max_size=60),  # the matched bands
            st.lists(st.integers(1, c), max_size=60),
        )
    )
)
def test_window_plan_is_bfd_around_the_vectorised_bands(case):
    capacity, middle, other = case
    _same(np.asarray(middle + other, dtype=np.int64), capacity)


def test_window_plan_is_bfd_on_lognormal_windows():
    rng = np.random.default_rng(7)
    for n in (1, 10, 1000, 10_000):
        costs = np.clip(np.rint(rng.lognormal(6.1, 1.1, n)), 1, 4096).astype(np.int64)
        order, offsets = plan_window(costs, 4096)
        ref_order, ref_offsets = plan_bfd_items(costs, 4096, 1 << 62)
        assert np.array_equal(order, ref_order) and np.array_equal(offsets, ref_offsets)


def test_window_plan_exact_values():
    # C = 12, by length: 8 and 7 open packs 0 and 1 (rooms 4, 5); the middle band (4, 6]: 6 finds no room and
    # opens pack 2 (room 6), the first 5 takes pack 1 (room 5, the best fit), the second 5 pack 2 (room 6 -> 1);
    # then 4 fills pack 0 and 1 the last room of pack 2
    lengths = [7, 8, 5, 4, 6, 5, 1]
    order, offsets = plan_window(np.array(lengths), 12)
    assert [order[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])] == [[1, 3], [0, 2], [4, 5, 6]]
    ref = plan_packs(lengths, capacity=12)
    assert order.tolist() == ref.order.tolist() and offsets.tolist() == ref.offsets.tolist()


def test_window_plan_falls_back_to_the_item_loop(monkeypatch):
    """A band that needs more re-matching rounds than allowed is placed by the item loop: the same plan."""
    import packwise.plan._window as window

    monkeypatch.setattr(window, "_MAX_ROUNDS", 1)
    rng = np.random.default_rng(3)
    fell_back = 0
    for capacity in (12, 100, 4096):
        for _ in range(50):
            costs = rng.integers(1, capacity + 1, 200)
            _same(costs, capacity)
            band = costs[(costs > capacity // 4) & (costs <= capacity // 3)]
            rem = np.full(1, capacity)
            fell_back += window._place_band(np.sort(band)[::-1], rem, capacity, 3) is None
    assert fell_back > 0


def test_stream_refuses_a_capacity_above_the_planners_limit():
    """The window planner packs rooms into 32 bits: above plan_packs' MAX_CAPACITY the stream still refuses."""
    import pytest

    from packwise.plan._api import MAX_CAPACITY
    from packwise.stream import PackingStream

    stream = PackingStream([{"input_ids": [1, 2]}] * 3, capacity=MAX_CAPACITY + 1, buffer_size=3, assemble=False)
    with pytest.raises(ValueError, match="capacity"):
        list(stream)
