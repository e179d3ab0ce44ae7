"""Shared Hypothesis strategies."""

from __future__ import annotations

from hypothesis import strategies as st

from packwise.plan import ALGORITHMS

CAPACITIES = st.one_of(st.integers(1, 64), st.sampled_from([100, 255, 256, 4097, 8193]))


@st.composite
def lengths_and_capacity(draw, max_n: int = 60):
    """(lengths, capacity) with every length in [1, capacity]; mixes uniform, few-distinct and equal lengths."""
    capacity = draw(CAPACITIES)
    n = draw(st.integers(0, max_n))
    kind = draw(st.sampled_from(["uniform", "few", "equal", "small"]))
    if kind == "uniform":
        item = st.integers(1, capacity)
    elif kind == "few":
        item = st.sampled_from(
            sorted({1, max(1, capacity // 2), max(1, capacity // 3 + 1), max(1, capacity // 6 + 1), capacity})
        )
    elif kind == "equal":
        item = st.just(draw(st.integers(1, capacity)))
    else:
        item = st.integers(1, max(1, capacity // 8))
    return draw(st.lists(item, min_size=n, max_size=n)), capacity


algorithms = st.sampled_from(ALGORITHMS)
