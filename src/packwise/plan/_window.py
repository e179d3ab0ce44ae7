"""Best-fit decreasing of one stream window, its longer sequences placed band by band with a few numpy calls.

The plan is :func:`packwise.plan.plan_packs`'s ``best_fit_decreasing`` plan, element for element (hypothesis
tests compare it with ``plan_packs`` and the histogram engine); only the work differs. BFD visits the sequences
by length descending (index ascending on ties) and puts each into the open pack with the least room that still
fits it (lowest pack on ties), or opens a pack.

Visited in that order, BFD is a stack machine: an open pack's room is *pushed* once the sequences get no longer
than it (largest first; lowest pack last among equal rooms), and a sequence *pops* the top — the least room that
fits, since every room pushed later is smaller — or opens a pack when the stack is empty. What a pop leaves is
pushed again once it fits the sequences, so in general the pushes depend on the pops (computing FFD's packing is
P-complete: Anderson, Mayr & Warmuth, Information and Computation 82(3), 1989 — no few-call vectorisation of the
whole plan is to be expected). Band by band it is mostly fixed:

* sequences longer than C/2 each open a pack (two never fit together);
* in the band ``(C/(k+1), C/k]`` a room smaller than twice the band's shortest sequence takes at most one of
  it; a new pack (opened when the stack is empty, so it lies below every other room) takes ``k`` of them in a
  row and then has room for none. So with the rooms known, the pops are parenthesis matching: the stack depth is
  a cumulative sum, a pop meets the last push at its level, and a stable sort of all events by (level, time)
  puts each pop right after its push — a few numpy calls for the whole band;
* the few larger rooms leave a room that fits the band again: the first such pop adds one push and the band is
  matched again from scratch (the matching before that pop cannot change), until no pop leaves one. A band that
  needs more than ``_MAX_ROUNDS`` of these is left to the item loop.

The remaining sequences are placed by the item-level BFD of :mod:`packwise.plan._bfd_items`, continuing from
the packs so far. On the benchmark's windows (lognormal lengths, C = 4096) the bands down to C/``_BANDS`` take
about a third of that loop's Python steps, for ~1.3× less planning time per window.

Source: best-fit decreasing — Johnson et al., SIAM J. Computing 3(4), 1974; the stack view and the band
matching are this module's own derivation (above).
"""

from __future__ import annotations

import numpy as np

from ._bfd_items import _csr, _place_runs, _room_keys
from ._engine import sort_by_length_desc


def plan_window(costs: np.ndarray, capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """BFD of ``(N,)`` int64 ``costs`` (each in ``[1, capacity]``), no sequence limit -> ``(order, offsets)`` CSR.

    Example:
        >>> order, offsets = plan_window(np.array([3, 5, 2, 6, 4]), 8)
        >>> order.tolist(), offsets.tolist()
        ([3, 2, 1, 0, 4], [0, 2, 4, 5])
    """
    n = costs.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64)
    idx = sort_by_length_desc(costs, capacity)
    ordered = costs[idx]
    big = int(np.searchsorted(-ordered, -(capacity // 2), side="left"))  # a > C/k  <=>  a > C // k (integers)
    rem = capacity - ordered[:big]  # one pack each
    bins = np.empty(n, dtype=np.int64)
    bins[:big] = np.arange(big)
    lo = big
    for k in range(2, _BANDS):
        hi = int(np.searchsorted(-ordered, -(capacity // (k + 1)), side="left"))  # ordered[lo:hi] in (C/(k+1), C/k]
        placed = _place_band(ordered[lo:hi], rem, capacity, k)
        if placed is None:
            break
        bins[lo:hi], rem = placed
        lo = hi
    nb = rem.shape[0]
    keep = np.flatnonzero(rem > 0)
    small = _place_runs(ordered[lo:], _room_keys(rem[keep], keep), capacity, nb)
    bins[lo:] = small
    if small.shape[0]:
        nb = max(nb, int(small.max()) + 1)
    return _csr(idx, bins, nb)


#: Bands (C/(k+1), C/k] placed by matching, k = 2 .. _BANDS - 1; rounds of re-matching allowed per band.
_BANDS = 6
_MAX_ROUNDS = 24


def _place_band(a: np.ndarray, rem: np.ndarray, capacity: int, k: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Place ``a`` (descending, each in ``(C/(k+1), C/k]``) into the packs of room ``rem`` or new packs of ``k``;
    returns each sequence's pack and the rooms of all packs after, or None after ``_MAX_ROUNDS`` re-matchings."""
    m = a.shape[0]
    if m == 0:
        return np.zeros(0, dtype=np.int64), rem
    nb = rem.shape[0]
    slot_bin = (rem >= a[-1]).nonzero()[0]
    slot_bin = slot_bin[(-(rem[slot_bin] << 32 | slot_bin)).argsort()]  # push order: larger room, then higher pack
    slot_val = rem[slot_bin]
    neg = -a
    push_time = neg.searchsorted(-slot_val)  # pushed before the first sequence it fits
    done = -1  # sequences up to here have their final pop
    for _ in range(_MAX_ROUNDS):
        slot = _stack_match(push_time, m)
        hit = (slot >= 0).nonzero()[0]
        left = slot_val[slot[hit]] - a[hit]
        again = ((left >= a[-1]) & (hit > done) & (hit < m - 1)).nonzero()[0]  # a leftover that fits the band
        if not again.shape[0]:
            break
        t = int(hit[again[0]])
        v = int(left[again[0]])
        done = t
        b = int(slot_bin[slot[t]])
        when = max(t + 1, int(neg.searchsorted(-v)))
        lo, hi = push_time.searchsorted([when, when + 1]).tolist()  # among the pushes made at the same time it goes
        at = lo + int(np.count_nonzero((slot_val[lo:hi] > v) | ((slot_val[lo:hi] == v) & (slot_bin[lo:hi] > b))))
        slot_bin = np.concatenate((slot_bin[:at], [b], slot_bin[at:]))  # after larger rooms (and equal rooms
        slot_val = np.concatenate((slot_val[:at], [v], slot_val[at:]))  # of higher packs), as in the first
        push_time = np.concatenate((push_time[:at], [when], push_time[at:]))  # push order
    else:
        return None
    out = np.empty(m, dtype=np.int64)
    out[hit] = slot_bin[slot[hit]]
    free = (slot < 0).nonzero()[0]  # found no room: new packs of k, in order
    out[free] = nb + np.arange(free.shape[0]) // k
    rem = np.concatenate([rem, np.full(-(-free.shape[0] // k), capacity, dtype=np.int64)])
    np.subtract.at(rem, out, a)
    return out, rem


def _stack_match(push_time: np.ndarray, m: int) -> np.ndarray:
    """Stack pushes (``push_time`` ascending: push ``p`` happens before sequence ``push_time[p]``) against ``m``
    pops (one per sequence, none when the stack is empty) -> the push each sequence pops, -1 for none.

    Parenthesis matching: the stack size before sequence ``i`` is ``pushed - popped``; a pop meets the last
    push at its level, so after a stable sort of all events by (level, position) each pop follows its push.
    """
    i = np.arange(m)
    pushed = push_time.searchsorted(i, side="right")
    empty_before = np.empty(m + 1, dtype=np.int64)  # (m+1,) pops that found none
    empty_before[0] = 0
    np.subtract(i + 1, pushed, out=empty_before[1:])
    np.maximum.accumulate(empty_before, out=empty_before)
    found = empty_before[1:] == empty_before[:-1]
    depth = pushed - i + empty_before[:-1]  # stack size before sequence i
    keep = push_time < m  # pushes after the last sequence are never popped
    p = keep.nonzero()[0]
    t = push_time[keep]
    popper = found.nonzero()[0]
    level = np.concatenate([p + 1 - (t - empty_before[t]), depth[popper]])
    where = np.concatenate([p + t, pushed[popper] + popper])  # distinct positions below p.size + m
    ev = (level * (p.shape[0] + m) + where).argsort()
    pop_at = (ev >= p.shape[0]).nonzero()[0]
    slot = np.empty(m, dtype=np.int64)
    slot.fill(-1)
    slot[popper[ev[pop_at] - p.shape[0]]] = p[ev[pop_at - 1]]
    return slot
