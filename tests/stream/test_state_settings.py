"""A stream state records the settings that decide the packs; loading it into a stream with other settings is
refused by name, and states saved before the record still load."""

from __future__ import annotations

import json

import pytest

from packwise.stream import PackingLoader, PackingStream

DATA = [{"input_ids": list(range(1, 2 + i % 5))} for i in range(30)]


def _stream(**kw):
    settings = {"capacity": 10, "buffer_size": 8, "seed": 1, **kw}
    return PackingStream(DATA, **settings)


def _ids(pack):
    return pack.input_ids.tolist()


def test_state_records_settings():
    state = json.loads(json.dumps(_stream().state_dict()))  # JSON-safe
    assert state["settings"] == {
        "capacity": 10, "buffer_size": 8, "seed": 1, "algorithm": "best_fit_decreasing", "overflow": "truncate",
        "shuffle": True, "drop_last": False, "alignment": 1, "algorithm_options": "[]", "max_segments": None,
    }  # fmt: skip


@pytest.mark.parametrize(
    "name, value",
    [
        ("capacity", 12),
        ("buffer_size", 4),
        ("seed", 2),
        ("overflow", "split"),
        ("shuffle", False),
        ("alignment", 2),
        ("max_segments", 2),
    ],
)
def test_mismatch_refused_by_name(name, value):
    state = json.loads(json.dumps(_stream().state_dict()))
    other = _stream(**{name: value})
    saved = _stream().state_dict()["settings"][name]
    with pytest.raises(ValueError, match=f"saved with {name}={saved!r} but this stream has {name}={value!r}"):
        other.load_state_dict(state)


def test_issue_example_refused():
    state = _stream().state_dict()
    with pytest.raises(ValueError, match=r"capacity=10 but this stream has capacity=12.*capacity=10"):
        PackingStream(DATA, capacity=12, buffer_size=4, seed=2).load_state_dict(state)


def test_same_settings_resume_identically():
    full = [_ids(p) for p in _stream()]
    s = _stream()
    it = iter(s)
    head = [_ids(next(it)) for _ in range(3)]
    fresh = _stream()
    fresh.load_state_dict(json.loads(json.dumps(s.state_dict())))
    assert head + [_ids(p) for p in fresh] == full


def test_state_without_settings_still_loads():
    full = [_ids(p) for p in _stream()]
    s = _stream()
    it = iter(s)
    head = [_ids(next(it)) for _ in range(3)]
    old = {k: v for k, v in s.state_dict().items() if k != "settings"}  # as saved before the record
    fresh = _stream()
    fresh.load_state_dict(old)
    assert head + [_ids(p) for p in fresh] == full


def test_loader_state_carries_settings():
    loader = PackingLoader(_stream(), batch_size=1, num_workers=0)
    state = loader.state_dict()
    assert state["settings"] == _stream().state_dict()["settings"]
    with pytest.raises(ValueError, match="saved with seed=1 but this stream has seed=2"):
        PackingLoader(_stream(seed=2), batch_size=1, num_workers=0).load_state_dict(state)
    PackingLoader(_stream(), batch_size=1, num_workers=0).load_state_dict(state)
