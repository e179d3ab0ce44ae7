"""PackingStream refuses a restored position past the end of the source and a length_fn that under-reports
(issue 15): never an empty epoch by mistake, never a pack over capacity."""

from __future__ import annotations

import numpy as np
import pytest

from packwise.stream import PackingLoader, PackingStream

SAMPLES = [{"input_ids": list(range(1, n + 1))} for n in (3, 5, 2, 6, 4)]  # 5 samples -> 3 windows of 2


def test_state_past_the_end_of_a_map_style_source():
    stream = PackingStream(SAMPLES, capacity=8, buffer_size=2)
    with pytest.raises(ValueError) as info:
        stream.load_state_dict({"epoch": 0, "window": 7, "pack": 0})
    assert str(info.value).startswith(
        "the restored state {'epoch': 0, 'window': 7, 'pack': 0} points at window 7, but the source has 5 samples "
        "= 3 windows of buffer_size 2"
    )
    with pytest.raises(ValueError, match="points at window 3, but the source has 5 samples"):
        stream.load_state_dict({"epoch": 0, "window": 3, "pack": 1})
    with pytest.raises(ValueError, match="points at window 9"):
        PackingLoader(PackingStream(SAMPLES, capacity=8, buffer_size=2)).load_state_dict(
            {"epoch": 0, "window": 9, "pack": 0}
        )


def test_state_at_the_end_is_a_finished_epoch():
    stream = PackingStream(SAMPLES, capacity=8, buffer_size=2)
    packs = list(stream)
    assert stream.state_dict()["window"] == 3 and len(packs) >= 3
    restored = PackingStream(SAMPLES, capacity=8, buffer_size=2)
    restored.load_state_dict(stream.state_dict())
    assert list(restored) == []


def test_state_past_the_end_of_an_iterable_source():
    stream = PackingStream(lambda: iter(SAMPLES), capacity=8, buffer_size=2, shuffle=False)
    stream.load_state_dict({"epoch": 0, "window": 4, "pack": 0})  # size unknown until read
    with pytest.raises(ValueError, match=r"points at window 4, but the source has 5 samples \(read this epoch\) = 3 "):
        list(stream)
    ok = PackingStream(lambda: iter(SAMPLES), capacity=8, buffer_size=2, shuffle=False)
    ok.load_state_dict({"epoch": 0, "window": 2, "pack": 0})
    assert [p.input_ids.tolist() for p in ok] == [[1, 2, 3, 4]]


def test_length_fn_that_under_reports_is_refused():
    stream = PackingStream(SAMPLES, capacity=8, buffer_size=5, shuffle=False, length_fn=lambda s: 2)
    with pytest.raises(ValueError) as info:
        list(stream)
    assert str(info.value).startswith("sample 0: length_fn says 2 tokens but its input_ids hold 3; packs planned")


def test_length_fn_that_over_reports_is_allowed():
    stream = PackingStream(SAMPLES, capacity=8, buffer_size=5, shuffle=False, length_fn=lambda s: 8)
    packs = list(stream)
    assert sorted(p.total_tokens for p in packs) == [2, 3, 4, 5, 6]  # one sample per pack, none over capacity


def test_samples_without_input_ids_never_exceed_capacity():
    samples = [{"labels": [7] * n} for n in (5, 5)]
    stream = PackingStream(samples, capacity=8, buffer_size=2, shuffle=False, length_fn=lambda s: 4)
    with pytest.raises(
        ValueError, match=r"pack 0 of window 0 holds 10 tokens > capacity 8 \(sequence lengths \[5, 5\]\)"
    ):
        list(stream)


def test_numpy_integer_capacity_and_buffer_size_are_accepted():
    stream = PackingStream(SAMPLES, capacity=np.int64(8), buffer_size=np.uint8(5), shuffle=False)
    assert type(stream.capacity) is int and type(stream.buffer_size) is int  # JSON-safe settings
    assert stream.state_dict()["settings"]["capacity"] == 8
    plain = PackingStream(SAMPLES, capacity=8, buffer_size=5, shuffle=False)
    assert [p.input_ids.tolist() for p in stream] == [p.input_ids.tolist() for p in plain]


@pytest.mark.parametrize("capacity", [True, np.bool_(True), 8.0, np.float64(8)])
def test_bool_or_float_capacity_is_refused_by_name(capacity):
    with pytest.raises(ValueError) as info:
        PackingStream(SAMPLES, capacity=capacity, buffer_size=5)
    assert str(info.value) == f"capacity must be an integer >= 1 (tokens per pack), got {capacity!r}"


BAD_COUNT = "; length_fn must return an int in [1, capacity=8] — the sample's token count (len(sample['input_ids'])); "


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (2**70, "1180591620717411303424 (int)"),
        (np.uint64(2**63), "np.uint64(9223372036854775808) (uint64)"),
        ("3", "'3' (str)"),
        (True, "True (bool)"),
        (3.0, "3.0 (float)"),
        (np.float32(3), "np.float32(3.0) (float32)"),
        (None, "None (NoneType)"),
        (0, "0 (int)"),
        (-1, "-1 (int)"),
    ],
)
def test_length_fn_must_return_an_int_of_at_least_one(value, shown):
    def length_fn(s):  # the third sample (source index 2) returns the bad value, the others their count
        return value if s["input_ids"][0] == 1 and len(s["input_ids"]) == 2 else len(s["input_ids"])

    for assemble in (True, False):
        stream = PackingStream(
            SAMPLES, capacity=8, buffer_size=5, shuffle=False, length_fn=length_fn, assemble=assemble
        )
        with pytest.raises(ValueError) as info:
            list(stream)
        assert (
            str(info.value)
            == f"sample 2: length_fn returned {shown}{BAD_COUNT}a longer count is cut by overflow='truncate'"
        )


@pytest.mark.parametrize("to_int", [int, np.int8, np.uint64, np.int64])
def test_length_fn_returning_python_or_numpy_ints_plans_as_the_default(to_int):
    def length_fn(s):
        return to_int(len(s["input_ids"]))

    got = PackingStream(SAMPLES, capacity=8, buffer_size=5, shuffle=False, length_fn=length_fn, assemble=False)
    plain = PackingStream(SAMPLES, capacity=8, buffer_size=5, shuffle=False, assemble=False)
    assert list(got) == list(plain)


@pytest.mark.parametrize("overflow", ["truncate", "split", "drop", "error"])
def test_length_fn_over_capacity_that_disagrees_with_the_tokens_is_refused(overflow):
    source = [{"input_ids": [1, 2]}, {"input_ids": list(range(8))}]  # sample 1 fits: 8 tokens, capacity 8
    stream = PackingStream(
        source, capacity=8, buffer_size=2, shuffle=False, overflow=overflow, assemble=False,
        length_fn=lambda s: len(s["input_ids"]) + 1,
    )  # fmt: skip
    with pytest.raises(ValueError) as info:
        list(stream)
    assert str(info.value) == (
        f"sample 1: length_fn returned 9 (> capacity 8) but its input_ids hold 8 tokens, so overflow={overflow!r} "
        "cannot be applied by that count — length_fn must return the sample's token count "
        "(len(sample['input_ids'])); overflow brings it to <= capacity 8"
    )
    assert stream.stats["truncated"] == stream.stats["split"] == stream.stats["dropped"] == 0


@pytest.mark.parametrize("overflow", ["truncate", "split", "drop"])
def test_length_fn_that_returns_the_token_count_gets_the_default_overflow(overflow):
    source = [{"input_ids": list(range(n)), "labels": list(range(n))} for n in (3, 11, 20, 8)]
    got = PackingStream(source, capacity=8, buffer_size=4, shuffle=False, overflow=overflow, assemble=False,
                        length_fn=lambda s: len(s["input_ids"]))  # fmt: skip
    plain = PackingStream(source, capacity=8, buffer_size=4, shuffle=False, overflow=overflow, assemble=False)
    assert list(got) == list(plain) and got.stats == plain.stats


def test_a_cut_piece_that_length_fn_still_reports_over_capacity_is_refused():
    source = [{"text": "abcdefghij"}]  # no per-token list: the cut cannot shorten it
    stream = PackingStream(
        source, capacity=8, buffer_size=1, overflow="truncate", assemble=False, length_fn=lambda s: len(s["text"])
    )
    with pytest.raises(ValueError) as info:
        list(stream)
    assert str(info.value) == (
        "sample 0: overflow='truncate' cut it (length_fn returned 10) to tokens 0:8, but length_fn returned 10 for "
        "that piece of 8 tokens; length_fn must return the sample's token count (len(sample['input_ids'])), "
        "<= capacity 8 after overflow"
    )
    assert stream.stats["truncated"] == 0
    cut = PackingStream([{"labels": list(range(10))}], capacity=8, buffer_size=1, overflow="truncate", assemble=False,
                        length_fn=lambda s: len(s["labels"]))  # fmt: skip
    assert list(cut) == [[{"labels": list(range(8))}]] and cut.stats["tokens_truncated"] == 2
