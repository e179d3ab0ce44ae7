"""Hand-checked goldens and histogram == item-by-item equivalence for every planner."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packwise.plan import plan_packs
from tests.plan import reference as ref
from tests.strategies import lengths_and_capacity


def packs(lengths, capacity, algorithm, **kw):
    return [p.tolist() for p in plan_packs(lengths, capacity=capacity, algorithm=algorithm, **kw).packs()]


def test_greedy_knapsack_golden():
    # C=10: pack 1 takes 6 then the largest that fits in 4 (4); pack 2 takes 5, 3, 2.
    assert packs([6, 5, 4, 3, 2], 10, "greedy_knapsack") == [[0, 2], [1, 3, 4]]


def test_balanced_greedy_knapsack_golden():
    # K = ceil(16/8) + 0 = 2 packs; 4s are dealt to the least-loaded pack, ties to the lowest index.
    assert packs([4, 4, 4, 4], 8, "balanced_greedy_knapsack", delta=0) == [[0, 2], [1, 3]]


def test_balanced_greedy_knapsack_delta_spreads_load():
    # delta=2 -> 4 packs for 16 tokens: one 4 each.
    assert packs([4, 4, 4, 4], 8, "balanced_greedy_knapsack", delta=2) == [[0], [1], [2], [3]]


def test_bfd_and_ffd_differ():
    # C=10, sorted 8,6,3,1. After 8 (free 2) and 6+3 (free 1), the 1 goes to the first pack with room
    # under FFD (free 2) and to the tightest under BFD (free 1).
    assert packs([8, 6, 3, 1], 10, "ffd") == [[0, 3], [1, 2]]
    assert packs([8, 6, 3, 1], 10, "bfd") == [[0], [1, 2, 3]]


def test_mffd_golden_beats_ffd():
    # C=30: large > 15, medium (10, 15], small (5, 10], tiny <= 5.
    # 1. the 18 (index 5) opens the only A-pack, free 12.  2. no medium exists.
    # 3. backward: the two smallest smalls are 6 and 6 (indices 3, 4), 12 <= 12: take index 3, then the
    #    largest small that fits in 6: index 4. The A-pack is full: [5, 3, 4].
    # 4. nothing fits.  5. FFD on 9, 7, 7, 6 (indices 0, 1, 2, 6): 29 tokens, one pack.
    lengths = [9, 7, 7, 6, 6, 18, 6]
    assert packs(lengths, 30, "mffd") == [[5, 3, 4], [0, 1, 2, 6]]
    assert packs(lengths, 30, "ffd") == [[5, 0], [1, 2, 3, 4], [6]]


def test_next_fit_keeps_order():
    assert packs([3, 3, 5, 1, 4], 6, "concatenative") == [[0, 1], [2, 3], [4]]


def test_spfhp_worst_fit_one_per_step():
    # C=10, lengths 6, 6, 3, 3, 2: two packs of 6 (free 4 each); the 3s go one per pack (worst fit),
    # then the 2 has no room (free 1, 1) and opens a pack.
    assert packs([6, 6, 3, 3, 2], 10, "spfhp") == [[0, 2], [1, 3], [4]]


def test_lpfhp_best_fit_with_copies():
    # C=10: 7 (free 3); 3 fits it exactly; then three 2s: a new pack takes all three (copies).
    assert packs([7, 3, 2, 2, 2], 10, "lpfhp") == [[0, 1], [2, 3, 4]]


def test_first_fit_shuffle_uses_local_rng_only():
    state = np.random.get_state()
    a = packs(list(range(1, 30)), 40, "ffs", seed=3)
    np.random.seed(123)
    b = packs(list(range(1, 30)), 40, "ffs", seed=3)
    assert a == b
    assert packs(list(range(1, 30)), 40, "ffs", seed=4) != a
    np.random.set_state(state)


def test_max_sequences_per_pack_one():
    assert packs([1, 1, 1], 10, "bfd", max_sequences_per_pack=1) == [[0], [1], [2]]


REFERENCES = {
    "best_fit_decreasing": lambda L, c, m: ref.fit_decreasing(L, c, m, best=True),
    "first_fit_decreasing": lambda L, c, m: ref.fit_decreasing(L, c, m),
    "greedy_knapsack": ref.greedy_knapsack,
    "balanced_greedy_knapsack": ref.balanced_greedy_knapsack,
    "modified_first_fit_decreasing": ref.mffd,
    "next_fit": ref.next_fit,
}


@pytest.mark.parametrize("algorithm", sorted(REFERENCES))
@settings(max_examples=150, deadline=None)
@given(data=lengths_and_capacity(), max_seqs=st.one_of(st.none(), st.integers(1, 5)))
def test_histogram_path_equals_item_by_item(algorithm, data, max_seqs):
    lengths, capacity = data
    expected = REFERENCES[algorithm](lengths, capacity, max_seqs)
    assert packs(lengths, capacity, algorithm, max_sequences_per_pack=max_seqs) == expected


@settings(max_examples=100, deadline=None)
@given(data=lengths_and_capacity(), seed=st.integers(0, 2**32 - 1), max_seqs=st.one_of(st.none(), st.integers(1, 4)))
def test_first_fit_shuffle_is_first_fit_on_the_seeded_permutation(data, seed, max_seqs):
    lengths, capacity = data
    perm = np.random.default_rng(seed).permutation(len(lengths)).tolist()
    got = packs(lengths, capacity, "ffs", seed=seed, max_sequences_per_pack=max_seqs)
    assert got == ref.first_fit(lengths, capacity, perm, max_seqs)
