"""The stream's fast window path changes no pack: each window is ``plan_packs``' plan, emitted in the seeded
order, and the position is exact after every pack (packs are sliced as they are emitted)."""

from __future__ import annotations

import numpy as np
import pytest

from packwise.plan import plan_packs
from packwise.stream import PackingStream

SOURCE = [5, 3, 9, 1, 12, 7, 7, 2, 4, 8, 6, 11, 3, 3, 10, 1, 2, 16, 5, 9]


def test_golden_emission_order():
    """Pinned output (computed before the lazy emission and the stack-machine item loop): any change of plan or
    of emission order shows here."""
    stream = PackingStream(SOURCE, capacity=16, buffer_size=8, length_fn=int, assemble=False, seed=3)
    assert list(stream) == [[3, 3, 2, 1], [6, 5, 4, 1], [16], [8], [10, 3], [9, 7], [11, 5], [12, 2], [9, 7]]
    stream.set_epoch(1)
    assert list(stream) == [[9, 7], [8, 2, 2], [16], [12, 3], [10, 6], [7, 3, 3, 1], [11, 5], [9, 5, 1], [4]]
    plain = PackingStream(lambda: iter(SOURCE), capacity=16, buffer_size=8, length_fn=int, assemble=False, seed=3)
    assert list(plain) == [[9, 7], [5], [12, 3, 1], [11, 4], [6, 3, 3, 2], [8, 7], [9, 2], [16], [10, 5, 1]]


def expected_packs(lengths: np.ndarray, capacity: int, buffer: int, seed: int, epoch: int = 0) -> list[list[int]]:
    """Re-derived from the public planner: per window (``shuffle=False``: consecutive slices) ``plan_packs``' plan
    of the samples' indices, packs permuted by the window's seeded generator."""
    out = []
    for w, a in enumerate(range(0, lengths.shape[0], buffer)):
        plan = plan_packs(lengths[a : a + buffer], capacity=capacity)
        packs = [(plan.order[s:e] + a).tolist() for s, e in zip(plan.offsets[:-1], plan.offsets[1:])]
        order_seed = int(np.random.SeedSequence([seed, epoch, w]).generate_state(2)[1])
        out += [packs[p] for p in np.random.default_rng(order_seed).permutation(len(packs)).tolist()]
    return out


@pytest.mark.parametrize("buffer", [1, 7, 2_500, 6_000])
def test_every_window_is_plan_packs_in_the_seeded_order(buffer):
    rng = np.random.default_rng(buffer)
    lengths = np.clip(np.rint(rng.lognormal(6.1, 1.1, 6_000 if buffer > 7 else 60)), 1, 4096).astype(np.int64)
    samples = [{"input_ids": range(n), "sid": i} for i, n in enumerate(lengths.tolist())]
    stream = PackingStream(samples, capacity=4096, buffer_size=buffer, seed=11, shuffle=False, assemble=False)
    got = [[s["sid"] for s in pack] for pack in stream]
    assert got == expected_packs(lengths, 4096, buffer, seed=11)


@pytest.mark.parametrize("iterable", [False, True])
def test_position_is_exact_after_every_pack(iterable):
    rng = np.random.default_rng(2)
    lengths = rng.integers(1, 30, 90).tolist()

    def make() -> PackingStream:
        source = (lambda: iter(lengths)) if iterable else lengths
        return PackingStream(source, capacity=32, buffer_size=20, length_fn=int, assemble=False, seed=4)

    first = make()
    packs, states = [], []
    for pack in first:
        packs.append(pack)
        states.append(first.state_dict())
    assert states[-1]["window"] == 5 and states[-1]["pack"] == 0  # the epoch's end: 90 samples = 5 windows
    for k, state in enumerate(states):
        fresh = make()
        fresh.load_state_dict(state)
        assert list(fresh) == packs[k + 1 :], f"resume after pack {k} of {len(packs)}"


def test_packs_hold_the_source_objects_whatever_their_type():
    """Samples are gathered through an object array: sequences of equal length (which numpy would otherwise
    read as one 2-D array), tuples and arrays come back as themselves."""
    source = [[1, 2], [3, 4], (5, 6), np.arange(2), [7, 8, 9]]
    stream = PackingStream(source, capacity=4, buffer_size=5, length_fn=len, assemble=False, shuffle=False)
    packs = list(stream)
    assert sorted(len(p) for p in packs) == [1, 2, 2]
    got = [s for p in packs for s in p]
    assert len(got) == 5 and all(any(s is t for t in source) for s in got)
