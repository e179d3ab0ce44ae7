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
    half, third = capacity // 2, capacity // 3  # a > C/3  <=>  a > C // 3 for integers
    big = int(np.searchsorted(-ordered, -half, side="left"))  # ordered[:big] > C // 2: one pack each
    mid = int(np.searchsorted(-ordered, -third, side="left"))  # ordered[big:mid] in (C/3, C/2]
    rem = capacity - ordered[:big]
    bins = np.empty(n, dtype=np.int64)
    bins[:big] = np.arange(big)
    mid_bins, rem = _place_middle(ordered[big:mid], rem, capacity)
    bins[big:mid] = mid_bins
    nb = rem.shape[0]
    keep = np.flatnonzero(rem > 0)
    keys = ((rem[keep] << _SHIFT) | keep).tolist()
    keys.sort()
    keys.append(_SENTINEL)
    small = _place_runs(ordered[mid:], keys, capacity, nb)
    bins[mid:] = small
    if small.shape[0]:
        nb = max(nb, int(small.max()) + 1)
    order = idx[np.argsort(bins, kind="stable")]
    offsets = np.zeros(nb + 1, dtype=np.int64)
    np.cumsum(np.bincount(bins, minlength=nb), out=offsets[1:])
    return order, offsets


def _place_middle(a: np.ndarray, rem: np.ndarray, capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """Place ``a`` (descending, each in ``(C/3, C/2]``) into the packs of room ``rem`` (one per sequence longer
    than C/2, in pack order) or new packs; returns each sequence's pack and the rooms of all packs after."""
    m = a.shape[0]
    big = rem.shape[0]
    if m == 0:
        return np.zeros(0, dtype=np.int64), rem
    # pushes: rooms that fit some sequence, largest first, lowest pack last (on top) among equal rooms
    cand = np.flatnonzero(rem >= a[-1])
    slot_bin = cand[np.lexsort((-cand, -rem[cand]))]
    slot_val = rem[slot_bin]
    pushed = np.searchsorted(-slot_val, -a, side="right")  # rooms >= a[i]: pushed before sequence i
    i = np.arange(m)
    unmatched_before = np.maximum.accumulate(np.concatenate([[0], 1 - (pushed - i)]))  # (m+1,)
    unmatched = np.diff(unmatched_before) > 0
    depth = pushed - i + unmatched_before[:-1]  # stack size before sequence i pops
    # level of push p: its depth after the push; it is pushed before the first sequence j with pushed[j] > p
    p = np.arange(slot_bin.shape[0])
    j = np.searchsorted(pushed, p, side="right")
    ok = j < m  # pushes after the last sequence are never popped
    p, j = p[ok], j[ok]
    push_level = p + 1 - (j - unmatched_before[j])
    matched = np.flatnonzero(~unmatched)
    # events sorted by (level, position in the push/pop sequence): each pop comes right after its push
    level = np.concatenate([push_level, depth[matched]])
    where = np.concatenate([p + j, pushed[matched] + matched])
    ev = np.lexsort((where, level))
    is_pop = ev >= p.shape[0]
    pop_at = np.flatnonzero(is_pop)
    out = np.empty(m, dtype=np.int64)
    out[matched[ev[pop_at] - p.shape[0]]] = slot_bin[p[ev[pop_at - 1]]]
    # unmatched sequences: the 1st opens a pack, the 2nd joins it, the 3rd opens the next, ...
    u = np.flatnonzero(unmatched)
    out[u] = big + np.arange(u.shape[0]) // 2
    new = -(-u.shape[0] // 2)
    rem = np.concatenate([rem, np.full(new, capacity, dtype=np.int64)])
    np.subtract.at(rem, out, a)
    return out, rem
