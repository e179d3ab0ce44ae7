"""plan_histogram: the plan from counts[length] alone equals plan_packs on the expanded lengths."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packwise.plan import HISTOGRAM_ALGORITHMS, plan_histogram, plan_packs
from tests.strategies import lengths_and_capacity


@settings(max_examples=250, deadline=None)
@given(
    data=lengths_and_capacity(),
    algorithm=st.sampled_from(HISTOGRAM_ALGORITHMS),
    max_seqs=st.one_of(st.none(), st.integers(1, 6)),
    alignment=st.sampled_from([1, 1, 2, 4]),
    min_packs=st.one_of(st.none(), st.integers(0, 12)),
    multiple=st.one_of(st.none(), st.integers(1, 5)),
    cut=st.floats(0, 1),
)
def test_histogram_plan_is_plan_packs(data, algorithm, max_seqs, alignment, min_packs, multiple, cut):
    lengths, capacity = data
    lengths = np.asarray([x for x in (min(x, capacity // alignment * alignment) for x in lengths) if x >= 1], np.int64)
    kw = {"capacity": capacity, "algorithm": algorithm, "max_sequences_per_pack": max_seqs, "alignment": alignment}
    kw |= {"min_packs": min_packs, "pack_count_multiple": multiple}
    try:
        ref = plan_packs(lengths, **kw)
    except ValueError as e:  # too few sequences for the pack-count target: both refuse, with the same message
        with pytest.raises(ValueError, match="cannot make"):
            plan_histogram(np.bincount(lengths), **kw)
        assert "cannot make" in str(e)
        return
    hp = plan_histogram(np.bincount(lengths) if lengths.size else [], **kw)
    assert hp.num_packs == ref.num_packs
    got = hp.expand(lengths)
    assert got.plan_hash() == ref.plan_hash()  # same packs, same order inside each pack
    # a worker holding lengths[c:] places its rows from the plan and its per-cost offsets alone
    c = int(cut * lengths.shape[0])
    offsets = np.bincount(hp.costs_of(lengths[:c]), minlength=capacity + 1)
    pack, slot = hp.place(lengths[c:], offsets)
    starts = ref.offsets[:-1]
    assert (ref.order[starts[pack] + slot] == np.arange(c, lengths.shape[0])).all()
    # templates describe the packs: sizes and costs
    assert (hp.pack_sizes() == ref.pack_sizes()).all()
    per_pack = np.repeat(np.add.reduceat(hp.template_costs, hp.template_offsets[:-1]), hp.template_packs)
    if ref.num_packs:
        assert (per_pack == ref.pack_costs()).all()
    if alignment == 1:
        assert hp.metrics(pad_to_longest_tokens=ref.metrics().pad_to_longest_tokens) == ref.metrics()


def test_templates_exact():
    # lengths 7, 5, 5, 3, 3, 3, 1 at capacity 8, BFD: [7, 1], [5, 3], [5, 3], [3]
    counts = np.bincount([7, 5, 5, 3, 3, 3, 1])
    hp = plan_histogram(counts, capacity=8)
    assert hp.templates() == [(0, 1, [7, 1]), (1, 2, [5, 3]), (3, 1, [3])]
    assert hp.summary()["num_packs"] == 4 and hp.summary()["lower_bound_packs"] == 4
    # the two length-5 sequences go to packs 1 and 2, slot 0; the third 3 to pack 3
    assert [a.tolist() for a in hp.place([5, 5, 3, 3, 3])] == [[1, 2, 1, 2, 3], [0, 0, 1, 1, 0]]


def test_memory_independent_of_n():
    small = plan_histogram([0, 0, 0, 10], capacity=9)
    big = plan_histogram([0, 0, 0, 10**12], capacity=9)
    assert small.templates() == [(0, 3, [3, 3, 3]), (3, 1, [3])]
    assert big.templates() == [(0, 333_333_333_333, [3, 3, 3]), (333_333_333_333, 1, [3])]
    assert big.num_packs == 333_333_333_334


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"algorithm": "next_fit"}, "keeps the input order"),
        ({"algorithm": "ffs"}, "shuffles"),
        ({"capacity": 4}, "sequences have 5 tokens > capacity 4"),
        ({"alignment": 4, "capacity": 6}, "8 after alignment to 4"),
        ({"delta": 1}, "takes no options"),
    ],
)
def test_refuses(kwargs, match):
    kw = {"capacity": 8, **kwargs}
    with pytest.raises((ValueError, TypeError), match=match):
        plan_histogram([0, 1, 0, 0, 0, 2], **kw)


def test_bad_counts():
    with pytest.raises(ValueError, match=r"counts\[0\] = 2"):
        plan_histogram([2, 1], capacity=4)
    with pytest.raises(ValueError, match=r"counts\[1\] = -1"):
        plan_histogram([0, -1], capacity=4)
    with pytest.raises(TypeError, match="integers"):
        plan_histogram([0.0, 1.5], capacity=4)


def test_cli_histogram(tmp_path, capsys):
    import json

    from packwise.cli import main

    counts = tmp_path / "counts.txt"
    counts.write_text("7 1\n5 2\n3 3\n1 1\n")  # lengths 7, 5, 5, 3, 3, 3, 1
    assert main(["plan", str(counts), "--histogram", "--capacity", "8,6", "--algorithm", "bfd,spfhp", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    rows = [(r["capacity"], r["algorithm"], r["packs"], r["lower_bound"], r["templates"]) for r in got["rows"]]
    assert rows == [
        (8, "best_fit_decreasing", 4, 4, 3),
        (8, "shortest_pack_first_histogram", 4, 4, 3),
        (6, "best_fit_decreasing", 5, 5, 5),  # [6] [5, 1] [5] [3, 3] [3]
        (6, "shortest_pack_first_histogram", 6, 5, 4),
    ]
    assert got["sequences"] == 7 and got["clipped"][1] == {"capacity": 6, "sequences": 1, "tokens_cut": 1}
    assert main(["plan", str(counts), "--histogram", "--capacity", "8", "--algorithm", "next_fit"]) != 0
    assert "keeps the input order" in capsys.readouterr().err


def test_streamed_plan_hash_and_pack_offsets():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 50, 2000)
    for kw in ({}, {"alignment": 4, "min_packs": 700}):
        ref = plan_packs(lengths, capacity=64, **kw)
        hp = plan_histogram(np.bincount(lengths), capacity=64, **kw)
        assert (hp.pack_offsets(np.arange(hp.num_packs + 1)) == ref.offsets).all()
        chunks = np.array_split(lengths, 7), np.array_split(ref.order, 3)
        assert hp.plan_hash(*chunks, chunk_packs=100) == ref.plan_hash()
        with pytest.raises(ValueError, match="order chunks hold 1999 values, the plan 2000"):
            hp.plan_hash([lengths], [ref.order[1:]])


def test_cli_histogram_all_leaves_balanced_knapsack_out_above_1e8(tmp_path):
    """The new-user trial's 1e9 example took 5.6 min, 335 s of it balanced_greedy_knapsack: left out (and said)."""
    from packwise.cli._plan import compare_histogram

    counts = np.zeros(65, dtype=np.int64)
    counts[[8, 24, 40]] = 50_000_000  # 1.5e8 sequences
    out = compare_histogram(counts, capacities=[64], algorithms="all")
    assert "balanced_greedy_knapsack" not in out["algorithms"]
    assert [s["algorithm"] for s in out["skipped"]] == ["balanced_greedy_knapsack"]
    named = compare_histogram(counts[:41] // 10**6, capacities=[64], algorithms=["balanced_greedy_knapsack"])
    assert named["algorithms"] == ["balanced_greedy_knapsack"] and not named["skipped"]
