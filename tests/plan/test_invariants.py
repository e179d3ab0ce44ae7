"""Properties every planner must satisfy, on every input."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from packwise.plan import plan_packs
from tests.strategies import algorithms, lengths_and_capacity


@settings(max_examples=300, deadline=None)
@given(
    data=lengths_and_capacity(),
    algorithm=algorithms,
    max_seqs=st.one_of(st.none(), st.integers(1, 6)),
    seed=st.integers(0, 1000),
    alignment=st.sampled_from([1, 1, 2, 4]),
)
def test_plan_invariants(data, algorithm, max_seqs, seed, alignment):
    lengths, capacity = data
    lengths = [min(x, capacity // alignment * alignment) or 0 for x in lengths]
    lengths = [x for x in lengths if x >= 1]
    plan = plan_packs(
        lengths, capacity=capacity, algorithm=algorithm, max_sequences_per_pack=max_seqs, seed=seed, alignment=alignment
    )
    n = len(lengths)
    # each index exactly once
    assert sorted(plan.order.tolist()) == list(range(n))
    assert plan.offsets[0] == 0 and plan.offsets[-1] == n
    sizes = np.diff(plan.offsets)
    assert (sizes >= 1).all()
    if max_seqs:
        assert (sizes <= max_seqs).all()
    costs = [-(-x // alignment) * alignment for x in lengths]
    assert (plan.pack_costs() <= capacity).all()
    assert plan.num_packs >= math.ceil(sum(costs) / capacity)
    # determinism: same input and seed -> same plan
    again = plan_packs(
        lengths, capacity=capacity, algorithm=algorithm, max_sequences_per_pack=max_seqs, seed=seed, alignment=alignment
    )
    assert again.plan_hash() == plan.plan_hash()


@settings(max_examples=100, deadline=None)
@given(
    data=lengths_and_capacity(),
    algorithm=algorithms,
    min_packs=st.one_of(st.none(), st.integers(0, 12)),
    multiple=st.one_of(st.none(), st.integers(1, 8)),
)
def test_pack_count_constraints(data, algorithm, min_packs, multiple):
    lengths, capacity = data
    base = plan_packs(lengths, capacity=capacity, algorithm=algorithm)
    target = max(base.num_packs, min_packs or 0)
    if multiple:
        target = -(-target // multiple) * multiple
    if target > len(lengths):
        try:
            plan_packs(
                lengths, capacity=capacity, algorithm=algorithm, min_packs=min_packs, pack_count_multiple=multiple
            )
        except ValueError as e:
            assert f"cannot make {target} packs from {len(lengths)} sequences" in str(e)
        else:
            raise AssertionError("expected ValueError")
        return
    plan = plan_packs(
        lengths, capacity=capacity, algorithm=algorithm, min_packs=min_packs, pack_count_multiple=multiple
    )
    assert plan.num_packs == target
    assert sorted(plan.order.tolist()) == list(range(len(lengths)))
    assert (np.diff(plan.offsets) >= 1).all()
    assert (plan.pack_lengths() <= capacity).all()


def test_empty_input():
    plan = plan_packs([], capacity=8)
    assert plan.num_packs == 0 and plan.packs() == [] and plan.offsets.tolist() == [0]
    assert plan.metrics().utilisation == 0.0


def test_capacity_one_and_non_power_of_two():
    assert plan_packs([1, 1, 1], capacity=1).num_packs == 3
    plan = plan_packs([4097, 4096, 1, 8193], capacity=8193)
    assert [p.tolist() for p in plan.packs()] == [[3], [0, 1], [2]]
