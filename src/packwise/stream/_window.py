"""Best-fit decreasing of one stream window, with the sequences in ``(C/3, C/2]`` placed by a few numpy calls.

The plan is :func:`packwise.plan.plan_packs`'s ``best_fit_decreasing`` plan, element for element (a hypothesis
test compares them); only the work differs. BFD visits the sequences by length descending (index ascending on
ties) and puts each into the open pack with the least room that still fits it (lowest pack on ties).

Visited in that order, BFD is a stack machine: an open pack's room is *pushed* once the sequences get no longer
than it, and a sequence takes the top of the stack (the least room that fits: every room pushed later is
smaller) or opens a pack when the stack is empty. For the sequences of ``(C/3, C/2]`` that machine has a fixed
shape, so it needs no per-sequence Python:

* the packs opened by sequences longer than C/2 have room ``< C/2``; after taking one ``(C/3, C/2]`` sequence
  their room is ``< C/6``, too small for another one — each such room is pushed once and popped at most once;
* a sequence that finds no such room opens a pack with room ``>= C/2`` (larger than all those rooms), which the
  next sequence finding none takes; two of them leave ``< C/3``. So the unmatched sequences pair up, in order.

Matching pushes and pops of one stack is parenthesis matching: the stack depth is a cumulative sum, a pop meets
the last push at its depth, and a stable sort by (depth, time) puts each pop right after its push. The
sequences of ``[1, C/3]`` are then placed by the item-level BFD of :mod:`packwise.plan._bfd_items`, continuing
from the packs so far. On the benchmark's windows (lognormal lengths, C = 4096) this removes about a sixth of
that loop's Python steps.

Source: best-fit decreasing — Johnson et al., SIAM J. Computing 3(4), 1974; the stack view of best fit over
decreasing sizes and the depth-sorted parenthesis matching are this module's own derivation (above).
"""

from __future__ import annotations

import numpy as np

from ..plan._bfd_items import _SENTINEL, _SHIFT, _place_runs
from ..plan._engine import sort_by_length_desc


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
    # a > C/k  <=>  a > C // k for integers: bands (C/2, C], (C/3, C/2], (C/4, C/3], [1, C/4]
    big, mid, low = (int(np.searchsorted(-ordered, -(capacity // k), side="left")) for k in (2, 3, 4))
    rem = capacity - ordered[:big]  # one pack each: two of them never fit together
    bins = np.empty(n, dtype=np.int64)
    bins[:big] = np.arange(big)
    bins[big:mid], rem = _place_band(ordered[big:mid], rem, capacity, 2, -1)
    last = rem.shape[0] - 1  # a new pack of the band holding one sequence (room >= C/2) is the bottom of the next
    bottom = last if last >= big and np.count_nonzero(bins[big:mid] == last) == 1 else -1
    bins[mid:low], rem = _place_band(ordered[mid:low], rem, capacity, 3, bottom)
    nb = rem.shape[0]
    keep = np.flatnonzero(rem > 0)
    keys = ((rem[keep] << _SHIFT) | keep).tolist()
    keys.sort()
    keys.append(_SENTINEL)
    small = _place_runs(ordered[low:], keys, capacity, nb)
    bins[low:] = small
    if small.shape[0]:
        nb = max(nb, int(small.max()) + 1)
    order = idx[np.argsort(bins, kind="stable")]
    offsets = np.zeros(nb + 1, dtype=np.int64)
    np.cumsum(np.bincount(bins, minlength=nb), out=offsets[1:])
    return order, offsets


def _place_band(
    a: np.ndarray, rem: np.ndarray, capacity: int, per_new: int, bottom: int
) -> tuple[np.ndarray, np.ndarray]:
    """Place ``a`` (descending, one band: ``(C/3, C/2]`` with ``per_new=2`` or ``(C/4, C/3]`` with ``per_new=3``)
    into the packs of room ``rem`` or new packs; returns each sequence's pack and the rooms of all packs after.

    Every room but ``bottom``'s takes at most one sequence of the band (shown in the module docstring); the
    ``bottom`` pack (-1: none) has more room than all of them and is taken by the first sequence that finds no
    other room, and what it leaves becomes one more room. New packs take ``per_new`` such sequences each.
    """
    m = a.shape[0]
    if m == 0:
        return np.zeros(0, dtype=np.int64), rem
    nb = rem.shape[0]
    cand = np.flatnonzero(rem >= a[-1])
    cand = cand[cand != bottom]
    slot_bin = cand[np.lexsort((-cand, -rem[cand]))]  # pushed largest first, lowest pack last among equals
    push_time = np.searchsorted(-a, -rem[slot_bin], side="left")  # pushed before the first sequence it fits
    slot = _stack_match(push_time, m)
    out = np.empty(m, dtype=np.int64)
    free = np.flatnonzero(slot < 0)  # sequences that find no room: the bottom pack, then new packs
    if bottom >= 0 and free.shape[0]:
        t1 = int(free[0])
        out[t1] = bottom
        left = int(rem[bottom] - a[t1])
        when = max(t1 + 1, int(np.searchsorted(-a, -left, side="left")))
        if when < m:  # what the bottom pack leaves fits later sequences: one more push, matched again
            at = int(np.searchsorted(push_time, when, side="right"))
            # after the larger rooms pushed then, before the others (the bottom pack has the highest index)
            at -= int(np.count_nonzero(rem[slot_bin[:at]][push_time[:at] == when] <= left))
            slot_bin = np.insert(slot_bin, at, bottom)
            push_time = np.insert(push_time, at, when)
            slot = _stack_match(push_time, m)
            free = np.flatnonzero(slot < 0)
        free = free[1:]
    hit = slot >= 0
    out[hit] = slot_bin[slot[hit]]
    out[free] = nb + np.arange(free.shape[0]) // per_new
    new = -(-free.shape[0] // per_new)
    rem = np.concatenate([rem, np.full(new, capacity, dtype=np.int64)])
    np.subtract.at(rem, out, a)
    return out, rem


def _stack_match(push_time: np.ndarray, m: int) -> np.ndarray:
    """Stack pushes (``push_time`` ascending: push ``p`` happens before sequence ``push_time[p]``) against ``m``
    pops (one per sequence, none when the stack is empty) -> the push each sequence pops, -1 for none.

    Parenthesis matching: the stack size before sequence ``i`` is ``pushed - popped``; a pop meets the last
    push at its level, so after a stable sort of all events by (level, position) each pop follows its push.
    """
    i = np.arange(m)
    pushed = np.searchsorted(push_time, i, side="right")
    empty_before = np.maximum.accumulate(np.concatenate([[0], 1 - (pushed - i)]))  # (m+1,) pops that found none
    found = np.diff(empty_before) == 0
    depth = pushed - i + empty_before[:-1]  # stack size before sequence i
    keep = push_time < m  # pushes after the last sequence are never popped
    p = np.flatnonzero(keep)
    t = push_time[keep]
    popper = np.flatnonzero(found)
    level = np.concatenate([p + 1 - (t - empty_before[t]), depth[popper]])
    where = np.concatenate([p + t, pushed[popper] + popper])
    ev = np.lexsort((where, level))
    pop_at = np.flatnonzero(ev >= p.shape[0])
    slot = np.full(m, -1, dtype=np.int64)
    slot[popper[ev[pop_at] - p.shape[0]]] = p[ev[pop_at - 1]]
    return slot
