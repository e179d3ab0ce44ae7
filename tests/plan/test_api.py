"""Validation messages, PackPlan accessors, metrics, alignment and the numpy-only import rule."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from packwise.plan import align_lengths, alignment_multiple, plan_packs


def test_import_plan_does_not_import_torch_or_pyarrow():
    code = "import sys, packwise.plan; print('torch' in sys.modules, 'pyarrow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


@pytest.mark.parametrize(
    ("lengths", "kwargs", "exc", "message"),
    [
        ([9000, 10], {"capacity": 8192}, ValueError, "sequence 0 has 9000 tokens > capacity 8192"),
        (
            [5, 8190],
            {"capacity": 8190, "alignment": 16},
            ValueError,
            "sequence 1 has 8190 tokens, 8192 after alignment to 16, > capacity 8190",
        ),
        ([3, 0], {"capacity": 8}, ValueError, "sequence 1 has length 0"),
        ([3, -2], {"capacity": 8}, ValueError, "sequence 1 has length -2"),
        ([1.0, 2.5], {"capacity": 8}, TypeError, "lengths[1] = 2.5"),
        ([1.0, float("nan")], {"capacity": 8}, TypeError, "lengths[1] = nan"),
        ([[1, 2], [3, 4]], {"capacity": 8}, ValueError, "must be 1-D"),
        ([True, False], {"capacity": 8}, TypeError, "got bool"),
        ([1], {"capacity": 0}, ValueError, "capacity must be an integer >= 1"),
        ([1], {"capacity": 8, "algorithm": "best_fit"}, ValueError, "unknown packing algorithm 'best_fit'"),
        (
            [1],
            {"capacity": 8, "algorithm": "bfd", "delta": 2},
            TypeError,
            "not option 'delta' (it belongs to balanced_greedy_knapsack)",
        ),
        ([1], {"capacity": 8, "algorithm": "bfd", "window": 2}, TypeError, "no algorithm takes it"),
        ([1], {"capacity": 8, "algorithm": "balanced_greedy_knapsack", "delta": -1}, ValueError, "delta=-1"),
        (
            [1],
            {"capacity": 8, "max_sequences_per_pack": 0},
            ValueError,
            "max_sequences_per_pack must be None or an integer >= 1",
        ),
        ([1, 1], {"capacity": 8, "min_packs": 3}, ValueError, "cannot make 3 packs from 2 sequences"),
    ],
)
def test_validation_messages(lengths, kwargs, exc, message):
    with pytest.raises(exc) as info:
        plan_packs(lengths, **kwargs)
    assert message in str(info.value)


def test_unknown_algorithm_lists_valid_names():
    with pytest.raises(ValueError) as info:
        plan_packs([1], capacity=8, algorithm="nope")
    for name in ("best_fit_decreasing (bfd)", "greedy_knapsack", "next_fit (concatenative)"):
        assert name in str(info.value)


def test_accepts_numpy_list_and_pyarrow():
    pa = pytest.importorskip("pyarrow")
    expected = plan_packs([3, 5, 2], capacity=8).plan_hash()
    assert plan_packs(np.array([3, 5, 2], dtype=np.int32), capacity=8).plan_hash() == expected
    assert plan_packs(pa.array([3, 5, 2]), capacity=8).plan_hash() == expected


def test_plan_does_not_touch_caller_array():
    lengths = np.array([3, 5, 2], dtype=np.int64)
    plan = plan_packs(lengths, capacity=8)
    lengths[0] = 1  # the caller's array stays writeable
    assert not plan.order.flags.writeable


def test_metrics_hand_checked():
    # C=10, lengths 6,5,4,3,2 -> greedy knapsack packs [6,4] and [5,3,2]: 20 tokens in 2 packs.
    m = plan_packs([6, 5, 4, 3, 2], capacity=10, algorithm="greedy_knapsack").metrics()
    assert (m.num_packs, m.total_tokens, m.utilisation, m.waste_tokens, m.lower_bound_packs) == (2, 20, 1.0, 0, 2)
    # batch_size = round(5/2) = 2 -> batches [6,5] [4,3] [2] padded to 6*2 + 4*2 + 2 = 22 tokens.
    assert (m.batch_size, m.pad_to_longest_tokens, m.padding_avoided_vs_longest) == (2, 22, 2)
    assert (m.pad_to_capacity_tokens, m.padding_avoided_vs_capacity, m.speedup_ceiling) == (50, 30, 2.5)
    assert m.speedup_vs_longest == pytest.approx(1.1)


def test_metrics_fill_balance_and_excess():
    # C=10, BFD on 9, 9, 1: [9, 1] and [9] -> fills 1.0 and 0.9, L1 = ceil(19/10) = 2.
    m = plan_packs([9, 9, 1], capacity=10).metrics()
    assert (m.fill_min, m.fill_max, m.excess_packs_pct) == (0.9, 1.0, 0.0)
    assert m.fill_balance == pytest.approx(1 - 0.05 / 0.95)


def test_plan_hash_is_stable():
    # Golden: changing planner internals must not change this hash silently (PLAN BREAKING CHANGE).
    plan = plan_packs([6, 5, 4, 3, 2], capacity=10, algorithm="greedy_knapsack")
    assert plan.plan_hash() == GOLDEN_HASH


GOLDEN_HASH = "684abcb0f405b7eb9eaf93083bba0d3c9eb70a8bdede7aa94deccba8db9dad1e"


def test_alignment_math():
    assert alignment_multiple(cp=2) == 4
    assert alignment_multiple(tp=4, cp=4, sequence_parallel=True) == 16
    assert alignment_multiple(tp=4, sequence_parallel=False) == 1
    assert alignment_multiple(fp8=True) == 16
    assert alignment_multiple(tp=3, cp=2, sequence_parallel=True) == 12
    assert align_lengths([1, 4, 5], 4).tolist() == [4, 4, 8]
    with pytest.raises(ValueError, match="cp must be an integer >= 1"):
        alignment_multiple(cp=0)


def test_plan_on_aligned_costs():
    # lengths 5 and 7 at alignment 4 cost 8 each: capacity 16 holds both, capacity 15 does not.
    assert plan_packs([5, 7], capacity=16, alignment=4).num_packs == 1
    assert plan_packs([5, 7], capacity=15, alignment=4).num_packs == 2
    assert plan_packs([5, 7], capacity=16, alignment=4).pack_costs().tolist() == [16]


def test_min_packs_splits_the_pack_with_the_largest_smaller_half():
    # greedy knapsack on C=10: [6,4] [5,3,2]; both hold 10 but the smaller LPT half of [5,3,2] is [3,2] (5
    # tokens) against [4]: [5,3,2] is split -> [5] [3,2].
    plan = plan_packs([6, 5, 4, 3, 2], capacity=10, algorithm="greedy_knapsack", min_packs=3)
    assert [p.tolist() for p in plan.packs()] == [[0, 2], [1], [3, 4]]


def test_min_packs_makes_no_crumb_pack():
    # FFD: [99,1] [30,30,30]. Splitting the fullest pack would give a 1-token pack (fills [1,90,99]); the
    # smaller half of [30,30,30] holds 30 tokens -> [30,30] [30]: fills [100,60,30] (as NeMo-RL's repair).
    plan = plan_packs([99, 1, 30, 30, 30], capacity=100, algorithm="ffd", min_packs=3)
    assert sorted(plan.pack_costs().tolist()) == [30, 60, 100]
    assert sorted(plan.lengths[np.concatenate(plan.packs())].tolist()) == [1, 30, 30, 30, 99]  # nothing dropped


def test_uint64_length_above_int64_is_refused_as_too_large():
    with pytest.raises(ValueError) as info:
        plan_packs(np.array([3, 2**63], np.uint64), capacity=10)
    assert str(info.value) == (
        "sequence 1 has length 9223372036854775808, larger than any capacity (lengths are planned as int64, at most "
        "9223372036854775807); truncate or split it before planning"
    )
    plan = plan_packs(np.array([3, 5], np.uint64), capacity=10)  # in range: planned as usual
    assert [p.tolist() for p in plan.packs()] == [[1, 0]]
