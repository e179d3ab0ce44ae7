"""The histogram engine's two copy paths (strided block copies, vectorised small-block gather) give one plan."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packwise.plan._finalize as finalize
from packwise.plan import plan_packs

HISTOGRAM = [
    "first_fit_decreasing",
    "best_fit_decreasing",
    "modified_first_fit_decreasing",
    "greedy_knapsack",
    "shortest_pack_first_histogram",
    "longest_pack_first_histogram",
]


def _plan(lengths, algorithm, block, monkeypatch, **kw):
    monkeypatch.setattr(finalize, "_BLOCK", block)
    monkeypatch.setattr("packwise.plan._api.ITEM_PATH_MAX", -1)  # BFD through the histogram engine too
    return plan_packs(lengths, capacity=kw.pop("capacity", 4096), algorithm=algorithm, **kw)


@pytest.mark.parametrize("algorithm", HISTOGRAM)
def test_block_copies_and_small_gather_agree(algorithm, monkeypatch):
    rng = np.random.default_rng(3)
    lengths = np.clip(np.rint(rng.lognormal(6.1, 1.1, 60_000)), 1, 4096).astype(np.int64)
    every_block = _plan(lengths, algorithm, 1, monkeypatch)
    all_small = _plan(lengths, algorithm, 1 << 62, monkeypatch)
    default = _plan(lengths, algorithm, 256, monkeypatch)
    assert every_block.plan_hash() == all_small.plan_hash() == default.plan_hash()
    assert sorted(every_block.order.tolist()) == list(range(lengths.shape[0]))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(1, 64), min_size=1, max_size=400),
    st.sampled_from(HISTOGRAM),
    st.sampled_from([None, 1, 2, 3]),
    st.integers(1, 64),
)
def test_paths_agree_on_any_input(lengths, algorithm, max_seqs, block):
    with pytest.MonkeyPatch.context() as mp:
        kw = {"capacity": 64, "max_sequences_per_pack": max_seqs}
        a = _plan(lengths, algorithm, block, mp, **kw)
        b = _plan(lengths, algorithm, 1 << 62, mp, **dict(kw))
    assert a.plan_hash() == b.plan_hash()
