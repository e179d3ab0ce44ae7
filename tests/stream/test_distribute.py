"""distribute / assign_to_ranks goldens, a hypothesis invariant, and DistributedPackSampler on 2 gloo ranks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from hypothesis import given, settings
from hypothesis import strategies as st

from packwise.data import DistributedPackSampler
from packwise.plan import assign_to_ranks, distribute, pack_costs, plan_packs


def test_lpt_golden():
    # costs 5,4,3,3,2,1 over 2 ranks of 3 packs: 5->r0, 4->r1, 3->r1 (4<5), 3->r0, 2->r1 (7<8), 1->r0
    a = assign_to_ranks([5, 4, 3, 3, 2, 1], num_ranks=2)
    assert list(a) == [[0, 3, 5], [1, 2, 4]] and a.costs == [9.0, 9.0] and a.imbalance == 1.0
    assert list(assign_to_ranks([5, 4, 3, 3, 2, 1], num_ranks=2, order="plan")) == [[0, 3, 5], [1, 2, 4]]


def test_attention_cost_golden():
    # k = 1/(6h); h = 2 -> k = 1/12: [4,4] -> 8 + 32/12; [8] -> 8 + 64/12
    assert pack_costs([np.array([4, 4]), np.array([8])], "attention", hidden_size=2).tolist() == pytest.approx(
        [8 + 32 / 12, 8 + 64 / 12]
    )


def test_uneven_count_is_an_error_naming_the_fix():
    plan = plan_packs([5, 5, 5], capacity=5)
    with pytest.raises(
        ValueError,
        match="3 packs cannot give 2 ranks the same number of micro-batches; plan with pack_count_multiple=2",
    ):
        distribute(plan, num_ranks=2)
    even = plan_packs([5, 5, 5, 1], capacity=5, pack_count_multiple=2)
    assert even.num_packs == 4 and len(distribute(even, num_ranks=2)[0]) == 2


@settings(max_examples=100, deadline=None)
@given(costs=st.lists(st.integers(1, 1000), min_size=0, max_size=60), ranks=st.integers(1, 8))
def test_equal_counts_no_pack_lost_or_duplicated(costs, ranks):
    costs = costs[: len(costs) // ranks * ranks]
    a = assign_to_ranks(costs, num_ranks=ranks)
    assert len(a) == ranks and {len(r) for r in a} <= {len(costs) // ranks}
    assert sorted(i for r in a for i in r) == list(range(len(costs)))
    if costs:
        assert a.imbalance >= 1.0


def _worker(rank, world, port, lengths, out):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    sampler = DistributedPackSampler(lengths, cost="attention", seed=5)
    sampler.set_epoch(1)
    mine = list(sampler)
    gathered = [None] * world
    dist.all_gather_object(gathered, mine)
    if rank == 0:
        out.put(gathered)
    dist.destroy_process_group()


def test_distributed_sampler_two_gloo_processes():
    import socket

    rng = np.random.default_rng(0)
    lengths = [rng.integers(1, 500, rng.integers(1, 6)) for _ in range(10)]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, 2, port, lengths, q)) for r in range(2)]
    for p in procs:
        p.start()
    gathered = q.get(timeout=120)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert len(gathered[0]) == len(gathered[1]) == 5
    assert sorted(gathered[0] + gathered[1]) == list(range(10))
    expected = DistributedPackSampler(lengths, num_replicas=2, rank=0, cost="attention", seed=5)
    expected.set_epoch(1)
    assert sorted(gathered[0]) == sorted(expected)


def test_sampler_uneven_needs_drop_last():
    lengths = [np.array([3])] * 5
    with pytest.raises(ValueError, match="5 packs cannot give 2 ranks"):
        DistributedPackSampler(lengths, num_replicas=2, rank=0)
    s = DistributedPackSampler(lengths, num_replicas=2, rank=1, drop_last=True)
    assert len(s) == 2 and s.num_dropped == 1 and torch.tensor(list(s)).unique().numel() == 2
