"""The pipeline's steps (what both engines run): PackOptions checks every option once, and per-piece counts
merged with ``+`` equal the counts of the whole input, so the Ray engine's report is the local engine's."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packwise.files._read import from_rows
from packwise.pipeline import PackOptions, pack_columns
from packwise.pipeline.steps import (
    PackedCounts,
    PieceCounts,
    build_report,
    execute,
    overflow,
    plan,
    plan_from_histogram,
    shard_bounds,
    tokenize,
)


@pytest.mark.parametrize(
    ("fields", "error", "message"),
    [
        ({"capacity": 0}, ValueError, "capacity must be an integer >= 1 (tokens per pack), got 0"),
        ({"capacity": True}, ValueError, "capacity must be an integer >= 1 (tokens per pack), got True"),
        ({"capacity": 1 << 25}, ValueError, "capacity 33554432 is above 16,777,216 tokens"),
        ({"capacity": 8, "alignment": 16}, ValueError, "alignment must be an integer in [1, capacity=8], got 16"),
        ({"loss_on": "user"}, ValueError, "loss_on must be 'assistant' or 'all', got 'user'"),
        ({"overflow": "cut"}, ValueError, "unknown overflow policy 'cut'; use one of truncate, split, drop, error"),
        ({"format": "csv"}, ValueError, "unknown --format 'csv'; use one of jsonl, parquet, hf"),
        ({"algorithm": "nope"}, ValueError, "unknown packing algorithm 'nope'"),
        ({"algorithm_options": {"delta": 1}}, TypeError, "algorithm 'best_fit_decreasing' takes no options"),
        (
            {"algorithm": "balanced_greedy_knapsack", "algorithm_options": {"delta": -1}},
            ValueError,
            "delta=-1 must be an integer >= 0",
        ),
        ({"seed": -1}, ValueError, "seed must be >= 0, got -1"),
        ({"seed": 1.5}, TypeError, "seed must be an integer or None, got 1.5"),
        ({"max_sequences_per_pack": 0}, ValueError, "max_sequences_per_pack must be None or an integer >= 1"),
        ({"min_packs": -1}, ValueError, "min_packs must be None or an integer >= 0, got -1"),
        ({"pack_count_multiple": 0}, ValueError, "pack_count_multiple must be None or an integer >= 1, got 0"),
    ],
)
def test_pack_options_refuse_bad_values_before_any_work(fields, error, message, tmp_path):
    with pytest.raises(error) as e:
        PackOptions(**fields)
    assert message in str(e.value)
    with pytest.raises(error) as local:  # the local engine refuses before reading (the input does not exist)
        pack_columns(tmp_path / "missing.jsonl", **fields)
    assert str(local.value) == str(e.value)


def test_pack_options_replace_and_derived_values():
    opts = PackOptions(capacity=100, alignment=8, algorithm="BFD", algorithm_options=None)
    assert (opts.fit_capacity, opts.algorithm_name, opts.algorithm_options) == (96, "best_fit_decreasing", {})
    assert PackOptions.of(opts, capacity=64).capacity == 64 and PackOptions.of(opts) is opts
    assert opts.plan_kwargs()["capacity"] == 100 and opts.report_loss_on("tokens") == "labels"
    with pytest.raises(ValueError, match="capacity must be an integer >= 1"):
        opts.replace(capacity=-5)
    with pytest.raises(TypeError, match="options must be a PackOptions, got dict"):
        PackOptions.of({"capacity": 8})


def test_shard_bounds():
    assert shard_bounds(0, 5).tolist() == [0, 0]
    assert shard_bounds(10, 5).tolist() == [0, 5, 10]
    assert shard_bounds(11, 5).tolist() == [0, 5, 10, 11]


ROWS = st.lists(st.lists(st.integers(1, 500), min_size=1, max_size=40), min_size=1, max_size=30)


@settings(max_examples=40, deadline=None)
@given(
    ids=ROWS, cut=st.integers(0, 30), capacity=st.integers(4, 32), policy=st.sampled_from(["truncate", "split", "drop"])
)
def test_piece_counts_add_up_to_the_whole_input(ids, cut, capacity, policy):
    """Two pieces through tokenize + overflow, counts merged with ``+``: the whole input's counts, and the
    same report as the local engine's once the plan is made from the merged histogram."""
    cut = min(cut, len(ids))
    rows = [{"input_ids": x} for x in ids]
    opts = PackOptions(capacity=capacity, overflow=policy)

    def counts(part: list):
        raw = from_rows(part, name="list")
        samples, skipped = tokenize(raw, None, None, opts, skip_bad_rows=False)
        fitted, oc = overflow(samples, opts, raw.locate)
        return PieceCounts.of(raw.num_rows, len(skipped), samples, oc, fitted), fitted

    whole, samples = counts(rows)
    pieces = [counts(p)[0] for p in (rows[:cut], rows[cut:]) if p]
    merged = sum(pieces, PieceCounts())
    assert merged == whole
    if whole.sequences == 0:
        return
    the_plan = plan(samples.lengths, opts)
    packed, packed_counts = execute(samples, the_plan)
    assert packed_counts == PackedCounts.of(packed)
    report = build_report(
        source=("list", "fp", "tokens"), tokenizer=(None, None), options=opts, counts=merged, packed=packed_counts,
        plan=the_plan, plan_hash=the_plan.plan_hash(), metrics=the_plan.metrics(), timings={}, skipped=[],
    )  # fmt: skip
    local = pack_columns(rows, options=opts)[1]
    assert report.metadata() | {"input_fingerprint": local.input_fingerprint} == local.metadata()
    from_hist = plan_from_histogram(np.bincount(samples.lengths, minlength=capacity + 1), opts)
    assert from_hist.expand(samples.lengths).plan_hash() == the_plan.plan_hash()


def test_numpy_integers_are_integers_and_unknown_options_get_a_suggestion():
    import numpy as np

    import packwise
    from packwise.pipeline import PackOptions

    opts = PackOptions(
        capacity=np.int64(64), alignment=np.int32(8), seed=np.uint8(3), algorithm="ffs"
    )  # ffs reads the seed
    assert (opts.capacity, opts.alignment, opts.seed) == (64, 8, 3)
    assert type(opts.capacity) is int and type(opts.seed) is int  # JSON-serialisable in metadata.json
    with pytest.raises(TypeError, match=r"unknown packing option 'capcity' \(did you mean 'capacity'\?\)"):
        packwise.pack_dataset([{"input_ids": [1, 2, 3]}], capcity=64)
