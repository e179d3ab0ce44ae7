"""Exact resume at *every* batch boundary of a whole epoch: for 0 and 2 DataLoader workers, map-style and
iterable sources, and per-token columns of every shape (MRoPE ``(3, L)`` positions as tensors, numpy arrays
and nested lists, plus a 1-D side column)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from packwise.stream import PackingLoader, PackingStream

KINDS = ("tensor", "array", "list")


def samples(n: int = 48, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for i, k in enumerate(rng.integers(1, 40, n).tolist()):
        pos = np.stack([np.arange(k), np.arange(k) // 2, np.full(k, i)])
        kind = KINDS[i % 3]
        out.append(
            {
                "input_ids": torch.arange(1000 * i, 1000 * i + k),
                "position_ids": torch.from_numpy(pos) if kind == "tensor" else pos if kind == "array" else pos.tolist(),
                "mm_token_type_ids": torch.full((k,), i % 2, dtype=torch.int64),
                "sid": i,
            }
        )
    return out


def loader(source, workers: int) -> PackingLoader:
    stream = PackingStream(source, capacity=64, buffer_size=12, seed=5)
    return PackingLoader(stream, batch_size=2, num_workers=workers)


def fingerprint(batch: dict) -> tuple:
    keys = ("input_ids", "labels", "position_ids", "mm_token_type_ids", "cu_seqlens", "seq_idx")
    return (*(tuple(batch[k].flatten().tolist()) for k in keys), tuple(batch["position_ids"].shape),
            repr(batch["metadata"]["sid"]))  # fmt: skip


def check_every_boundary(source, workers: int) -> int:
    first = loader(source, workers)
    full, states = [], []
    for batch in first:
        full.append(fingerprint(batch))
        states.append(first.state_dict())  # where a job saved after this batch would continue
    assert len(full) >= 6
    for k, state in enumerate(states):
        fresh = loader(source, workers)  # new objects, as a restarted process would build
        fresh.load_state_dict(state)
        assert [fingerprint(b) for b in fresh] == full[k + 1 :], f"resume after batch {k} of {len(full)}"
    return len(full)


@pytest.mark.parametrize("iterable", [False, True])
def test_resume_after_every_batch_in_process(iterable):
    data = samples()
    n = check_every_boundary((lambda: iter(data)) if iterable else data, workers=0)
    seen = sorted(s for b in loader(data, 0) for pack in b["metadata"]["sid"] for s in pack)
    assert seen == list(range(len(data)))  # the epoch holds every sample once
    assert n >= 6


@pytest.mark.slow
@pytest.mark.parametrize("iterable", [False, True])
def test_resume_after_every_batch_with_two_workers(iterable):
    data = samples()
    src = (lambda: iter(data)) if iterable else data
    assert check_every_boundary(src, workers=2) >= 6
    assert [fingerprint(b) for b in loader(src, 2)] == [fingerprint(b) for b in loader(src, 0)]


def test_pickled_mid_window_keeps_the_position_not_the_packs():
    import pickle

    from packwise.stream import PackingStream

    samples = [{"input_ids": list(range(1, 2 + i % 7))} for i in range(40)]
    stream = PackingStream(samples, capacity=8, buffer_size=10, assemble=False)
    it = iter(stream)
    first = [next(it) for _ in range(3)]
    copy = pickle.loads(pickle.dumps(stream))
    assert copy._cur is None and copy._next == stream._next == (0, 3)
    rest = list(it)
    assert [len(p) for p in list(copy)] == [len(p) for p in rest]
    assert len(first) == 3
