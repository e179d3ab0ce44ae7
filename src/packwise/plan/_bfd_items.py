"""Item-by-item best-fit decreasing for small inputs (stream windows): the histogram engine's plan, faster.

The histogram engine's cost grows with the number of *distinct* lengths, and a 10,000-sample window has
~2,000 of them, each paying a few microseconds of Python bookkeeping (groups, events, segment tree). For
such windows a plain BFD over a sorted list of open packs is cheaper: the open packs are kept as one
sorted Python list of integer keys ``remaining << 32 | pack``, so "the pack with the least room that still
fits, lowest index on ties" is one ``bisect`` (C) and re-filing a pack one ``insort`` (C). Packs larger
than half the capacity never share a pack with each other, so they are opened in one vectorised step.
Without a sequence limit the rest runs as a stack machine (:func:`_place_runs`): one ``pop`` per (length,
pack) step; a room left smaller than the length waits, filed under the first run it fits, until that run.

The plan is identical, element for element, to :func:`packwise.plan._fit_decreasing.place_decreasing` with
``policy="best"`` (tests compare them with hypothesis): sequences visited by length descending, index
ascending; packs numbered in opening order; a pack's sequences in the order they were placed.

Source: best-fit decreasing — Johnson et al., SIAM J. Computing 3(4), 1974.
"""

from __future__ import annotations

from bisect import bisect_left, insort

import numpy as np

from ._engine import sort_by_length_desc

#: Inputs up to this many sequences take the item path in ``plan_packs``. Measured on lognormal(6.1, 1.1)
#: lengths, C = 4096, this 2-core machine: the item path is 8× faster at 5 k, 2.4–2.7× at 10–20 k, 1.5× at
#: 40 k and 0.8× at 100 k (re-filing a pack moves the tail of the sorted list: O(open packs) per sequence).
ITEM_PATH_MAX = 50_000

_SHIFT = 32
_MASK = (1 << _SHIFT) - 1
_SENTINEL = 1 << 62  # above every key: remaining < 2**25 (capacity <= 2**24)


def plan_bfd_items(costs: np.ndarray, capacity: int, max_seqs: int) -> tuple[np.ndarray, np.ndarray]:
    """BFD of ``(N,)`` int64 ``costs`` (each in ``[1, capacity]``) -> ``(order, offsets)`` CSR.

    Example:
        >>> order, offsets = plan_bfd_items(np.array([3, 5, 2, 6, 4]), 8, 1 << 62)
        >>> order.tolist(), offsets.tolist()
        ([3, 2, 1, 0, 4], [0, 2, 4, 5])
    """
    n = costs.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64)
    idx = sort_by_length_desc(costs, capacity)
    ordered = costs[idx]
    # packs holding more than half the capacity: one each, opened in order (nothing else fits beside them
    # before the small sequences arrive, and two of them never fit together)
    big = int(np.searchsorted(-ordered, -(capacity // 2), side="left"))  # ordered[:big] > capacity // 2
    big_rem = capacity - ordered[:big]
    keep = big_rem > 0 if max_seqs > 1 else np.zeros(big, dtype=bool)
    keys = _room_keys(big_rem[keep], np.flatnonzero(keep))
    bins = np.empty(n, dtype=np.int64)
    bins[:big] = np.arange(big)
    out: list[int] = []
    append, bisect, insert = out.append, bisect_left, insort
    nb = big
    full = capacity << _SHIFT
    # Keys are ``remaining << 32 | pack``; a sequence of length ``length`` is ``L = length << 32``, so the pack's
    # new key is ``k - L``. It can only move left: it is written in place when it stays at the same position,
    # else the list moves only the entries between its old and new positions.
    if max_seqs >= n:  # no pack can reach the sequence limit: runs of equal lengths placed a pack at a time
        runs = _place_runs(ordered[big:], keys, capacity, big)
        nb = int(runs.max()) + 1 if runs.shape[0] else big
        bins[big:] = runs
    else:
        counts = [1] * big
        for L in (ordered[big:] << _SHIFT).tolist():
            i = bisect(keys, L)
            k = keys[i]
            if k != _SENTINEL:
                b = k & _MASK
                append(b)
                del keys[i]
                counts[b] += 1
                nk = k - L
                if nk >> _SHIFT and counts[b] < max_seqs:
                    insert(keys, nk)
            else:
                append(nb)
                counts.append(1)
                if full != L and max_seqs > 1:
                    insert(keys, full - L + nb)
                nb += 1
        bins[big:] = out
    return _csr(idx, bins, max(nb, big))


def _room_keys(rooms: np.ndarray, packs: np.ndarray) -> list[int]:
    """The open packs as sorted keys ``room << _SHIFT | pack``, ending in ``_SENTINEL`` (bisect lands there
    when no open pack fits: open a new one)."""
    keys = ((rooms << _SHIFT) | packs).tolist()
    keys.sort()
    keys.append(_SENTINEL)
    return keys


def _csr(idx: np.ndarray, bins: np.ndarray, nb: int) -> tuple[np.ndarray, np.ndarray]:
    """``(order, offsets)`` of ``nb`` packs from each sorted position's pack ``bins`` (``idx``: the sort)."""
    key = bins.astype(np.uint16) if nb <= 1 << 16 else bins  # uint16: numpy's stable sort is a radix sort
    order = idx[np.argsort(key, kind="stable")]
    offsets = np.zeros(nb + 1, dtype=np.int64)
    np.cumsum(np.bincount(bins, minlength=nb), out=offsets[1:])
    return order, offsets


def _place_runs(small: np.ndarray, keys: list[int], capacity: int, first_pack: int) -> np.ndarray:
    """BFD of ``small`` (lengths descending, each <= C/2) into the open packs ``keys``; the pack of each.

    A run of ``c`` equal lengths ``l`` goes to the best-fitting pack ``t = min(c, remaining // l)`` at a time:
    once a pack was the best fit for ``l`` (no pack had room in ``[l, remaining)``), its new room
    ``remaining - l`` is the best fit for the next ``l`` as long as it holds ``l`` — exactly the item-by-item
    choice, in one Python step per (length, pack) instead of one per sequence.

    The packs are kept as a stack machine (see :mod:`packwise.plan._window`): ``stack`` holds the rooms that fit
    the current length, the least on top (the list's end), so a best fit is a ``pop``; a room left smaller than
    the length waits until the lengths get no longer than it — in ``waits[i]``, ``i`` the first run it fits
    (found by a room -> list table: one index, no sorted insertion) — and is pushed then, sorted: every room on
    the stack is at least the previous run's length, so the waiting rooms go on top and the stack stays sorted.
    ``keys`` (from :func:`_room_keys`) is consumed.
    """
    if not small.shape[0]:
        return np.zeros(0, dtype=np.int64)
    edge = np.flatnonzero(small[1:] != small[:-1]) + 1
    run_start = np.concatenate([[0], edge])
    run_len = np.diff(np.append(run_start, small.shape[0]))
    lengths = small[run_start]
    keys.pop()  # the sentinel
    waits: list[list[int]] = [[] for _ in range(lengths.shape[0] + 1)]  # the last: rooms no run fits
    slot = _wait_slots(lengths, waits)  # slot[room]: the wait list of the first run with length <= room
    j = bisect_left(keys, int(lengths[0]) << _SHIFT)
    stack = keys[: j - 1 : -1] if j else keys[::-1]  # descending: the least room (lowest pack on ties) on top
    for _ in map(list.append, map(slot.__getitem__, [k >> _SHIFT for k in keys[:j]]), keys[:j]):  # the rest wait
        pass
    out: list[int] = []  # one entry per (length, pack): ``pack | taken << _SHIFT``
    append, pop, push = out.append, stack.pop, stack.append
    nb = first_pack
    for length, shifted, c, w in zip(lengths.tolist(), (lengths << _SHIFT).tolist(), run_len.tolist(), waits):
        if w:  # rooms that now fit (all below the previous length): onto the stack, the least on top
            w.sort(reverse=True)
            stack += w
        while stack:
            k = pop()
            t = (k >> _SHIFT) // length
            if t >= c:  # the run ends in this pack
                append(k & _MASK | c << _SHIFT)
                k -= c * shifted
                if k >= shifted:  # still the least room that fits
                    push(k)
                elif k >> _SHIFT:
                    slot[k >> _SHIFT].append(k)
                break
            append(k & _MASK | t << _SHIFT)
            c -= t
            k -= t * shifted
            if k >> _SHIFT:
                slot[k >> _SHIFT].append(k)
        else:  # no open pack fits: new packs of ``capacity // length`` each, then the rest
            per = capacity // length
            q, rest = divmod(c, per)
            if q:
                out += range(nb | per << _SHIFT, (nb + q) | per << _SHIFT)
                room = capacity - per * length
                if room:  # less than the length: waits
                    slot[room].extend(range(room << _SHIFT | nb, room << _SHIFT | (nb + q)))
                nb += q
            if rest:  # room >= length left: the only room on the stack
                append(nb | rest << _SHIFT)
                push(((capacity - rest * length) << _SHIFT) | nb)
                nb += 1
    placed = np.fromiter(out, np.int64, len(out))
    return np.repeat(placed & _MASK, placed >> _SHIFT)


#: Longest first length for which :func:`_wait_slots` builds a room -> list table (one entry per room value);
#: above it (capacities over ~2**17 tokens) each lookup is a bisect over the run lengths.
_TABLE_MAX = 1 << 16


def _wait_slots(lengths: np.ndarray, waits: list[list[int]]):
    """``room -> waits[i]``, ``i`` the first run with ``lengths[i] <= room`` (``lengths`` descending; rooms below
    ``lengths[0]``): a list when ``lengths[0] <= _TABLE_MAX``, else an object indexing by bisect."""
    neg = -lengths
    if int(lengths[0]) <= _TABLE_MAX:
        return list(map(waits.__getitem__, neg.searchsorted(-np.arange(int(lengths[0]) + 1)).tolist()))
    return _BisectSlots(neg.tolist(), waits)


class _BisectSlots:
    """:func:`_wait_slots` without a table: ``slots[room]`` bisects the negated run lengths."""

    __slots__ = ("_neg", "_waits")

    def __init__(self, neg: list[int], waits: list[list[int]]) -> None:
        self._neg, self._waits = neg, waits

    def __getitem__(self, room: int) -> list[int]:
        return self._waits[bisect_left(self._neg, -room)]
