"""PackingStream / PackingLoader: exact resume (0 and 2 workers, new objects = process restart), epochs,
every sample exactly once, bounded windows, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from packwise.stream import PackingLoader, PackingStream, StreamSourceError


def samples(n=300, seed=0):
    rng = np.random.default_rng(seed)
    return [
        {"input_ids": torch.arange(1000 * i, 1000 * i + int(k)), "sid": i}
        for i, k in enumerate(rng.integers(1, 120, n))
    ]


def ids_of(batch):
    return batch["input_ids"][0].tolist()


def make(source, **kw):
    return PackingStream(source, capacity=256, buffer_size=40, seed=3, **kw)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("iterable", [False, True])
def test_exact_resume(workers, iterable):
    data = samples()
    src = (lambda: iter(data)) if iterable else data
    full = [ids_of(b) for b in PackingLoader(make(src), batch_size=1, num_workers=workers)]
    assert len(full) > 60
    loader = PackingLoader(make(src), batch_size=1, num_workers=workers)
    it = iter(loader)
    head = [ids_of(next(it)) for _ in range(7)]
    state = loader.state_dict()
    del it
    fresh = PackingLoader(make(src), batch_size=1, num_workers=workers)  # a new process would do this
    fresh.load_state_dict(state)
    rest = [ids_of(b) for b in fresh][:50]
    assert head == full[:7] and rest == full[7:57]


def test_same_packs_for_any_number_of_workers():
    data = samples()
    a = [ids_of(b) for b in PackingLoader(make(data), num_workers=0)]
    b = [ids_of(b) for b in PackingLoader(make(data), num_workers=2)]
    assert a == b


def test_stream_state_without_loader():
    data = samples(100)
    full = [p.input_ids.tolist() for p in make(data)]
    s = make(data)
    it = iter(s)
    for _ in range(5):
        next(it)
    state = s.state_dict()
    t = make(data)
    t.load_state_dict(state)
    assert [p.input_ids.tolist() for p in t] == full[5:]


@pytest.mark.parametrize("iterable", [False, True])
def test_every_sample_once_per_epoch_and_epochs_change_membership(iterable):
    data = samples()
    src = (lambda: iter(data)) if iterable else data
    stream = make(src)
    memberships = []
    for epoch in (0, 1):
        stream.set_epoch(epoch)
        packs = list(stream)
        sids = [s for p in packs for s in p.metadata["sid"]]
        assert sorted(sids) == list(range(len(data)))  # exactly once
        assert all(p.total_tokens <= 256 for p in packs)
        memberships.append({frozenset(p.metadata["sid"]) for p in packs if p.num_sequences > 1})
    assert memberships[0] != memberships[1]
    stream.set_epoch(0)
    again = {frozenset(p.metadata["sid"]) for p in stream if p.num_sequences > 1}
    assert again == memberships[0]  # deterministic for (seed, epoch)


def test_leftover_packed_unless_drop_last():
    data = samples(90)  # windows of 40: 40 + 40 + 10
    kept = [s for p in make(data, shuffle=False) for s in p.metadata["sid"]]
    assert len(kept) == 90
    stream = make(data, shuffle=False, drop_last=True)
    kept = [s for p in stream for s in p.metadata["sid"]]
    assert len(kept) == 80 and stream.stats["dropped_last"] == 10


@pytest.mark.parametrize(
    ("policy", "n_tokens", "expect"), [("truncate", 256, "truncated"), ("split", 300, "split"), ("drop", 0, "dropped")]
)
def test_long_sample_follows_the_overflow_policy(policy, n_tokens, expect):
    data = [{"input_ids": torch.arange(300)}, {"input_ids": torch.arange(10)}]
    stream = PackingStream(data, capacity=256, buffer_size=4, overflow=policy, shuffle=False)
    tokens = sum(p.total_tokens for p in stream)
    assert tokens == n_tokens + 10 and stream.stats[expect] == 1


def test_errors():
    with pytest.raises(ValueError, match="buffer_size must be an integer >= 1"):
        PackingStream([], capacity=8, buffer_size=0)
    with pytest.raises(ValueError, match="sample 0 has 300 tokens > capacity 256"):
        list(PackingStream([{"input_ids": torch.arange(300)}], capacity=256, buffer_size=4, overflow="error"))
    with pytest.raises(ValueError, match="the source yielded no samples"):  # an empty epoch is loud
        list(PackingStream([], capacity=8, buffer_size=4))

    def flaky():
        for i in range(10):
            if i == 7:
                raise OSError("disk gone")
            yield {"input_ids": torch.arange(5)}

    stream = PackingStream(flaky, capacity=16, buffer_size=5, shuffle=False)
    got = []
    with pytest.raises(StreamSourceError, match="source failed at sample 7 of this epoch: OSError: disk gone"):
        for p in stream:
            got.append(p)
    assert sum(p.num_sequences for p in got) == 5  # the failing window emitted nothing


def test_windows_without_packs_do_not_stall_the_loader():
    # the middle window holds only samples that are dropped: it yields no pack
    s = [{"input_ids": [1] * 3}] * 8 + [{"input_ids": [2] * 20}] * 4 + [{"input_ids": [3] * 3}] * 8
    for workers in (0, 1):
        stream = PackingStream(s, capacity=8, buffer_size=4, overflow="drop", shuffle=False)
        assert len(list(PackingLoader(stream, num_workers=workers))) == 8
    assert len(list(PackingStream(s, capacity=8, buffer_size=4, overflow="drop", shuffle=False))) == 8


@pytest.mark.parametrize(
    "state", [{"epoch": 0, "window": 0, "pack": -2}, {"epoch": -1, "window": 0, "pack": 0}, {"window": 1}]
)
def test_garbage_states_are_rejected(state):
    with pytest.raises(ValueError, match="not a PackingStream state"):
        make(samples(50)).load_state_dict(state)


def test_a_state_from_another_stream_is_caught():
    stream = make(samples(50))
    stream.load_state_dict({"epoch": 0, "window": 0, "pack": 99})
    with pytest.raises(ValueError, match="points at pack 99 of window 0"):
        list(stream)
