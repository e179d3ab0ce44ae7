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
