"""Histogram engine shared by the histogram planners (FFD, BFD, MFFD, greedy knapsack, SPFHP, LPFHP).

Sequences of equal length are interchangeable for a planner, so the histogram planners never look at
single sequences. They place *events* — "each of the ``g`` packs ``b .. b+g-1`` receives ``k``
sequences of length ``L``" — on *groups*: contiguous runs of packs whose contents are identical so
far. The number of events and groups depends on the number of distinct lengths, not on N.

:class:`HistogramBuilder` records events and turns the final groups into the CSR plan. The sequences
of one length are handed out in increasing index order, in the order the events happened, which is
exactly the order an item-by-item implementation processing ``(length desc, index asc)`` uses. The
tests keep item-by-item reference implementations and compare plans element for element.

:class:`KeyTree` is a segment tree over integer keys (free space, or length) that answers "first
non-empty key >= x", "last non-empty key <= x", "last non-empty key" and "key with the smallest value
among keys >= x" in O(log C).
"""

from __future__ import annotations

import heapq

import numpy as np

from ._finalize import Chains, build_plan
from ._sort import sort_by_length

INF = 1 << 62


class KeyTree:
    """Min segment tree over keys ``0 .. n-1``; a key is empty when its value is ``INF``."""

    __slots__ = ("size", "t")

    def __init__(self, n: int) -> None:
        size = 1
        while size < n:
            size <<= 1
        self.size = size
        self.t = [INF] * (2 * size)

    def set(self, key: int, value: int) -> None:
        t = self.t
        i = key + self.size
        if t[i] == value:
            return
        t[i] = value
        i >>= 1
        while i:
            a = t[2 * i]
            b = t[2 * i + 1]
            v = a if a < b else b
            if t[i] == v:
                return
            t[i] = v
            i >>= 1

    def first_at_least(self, lo: int) -> int | None:
        """Smallest non-empty key ``>= lo``."""
        t, size = self.t, self.size
        if lo >= size:
            return None
        i = lo + size
        if t[i] < INF:
            return lo
        while i > 1:
            if not i & 1 and t[i + 1] < INF:
                i += 1
                break
            i >>= 1
        else:
            return None
        while i < size:
            i <<= 1
            if t[i] >= INF:
                i += 1
        return i - size

    def last_at_most(self, hi: int) -> int | None:
        """Largest non-empty key ``<= hi``."""
        t, size = self.t, self.size
        if hi < 0:
            return None
        hi = min(hi, size - 1)
        i = hi + size
        if t[i] < INF:
            return hi
        while i > 1:
            if i & 1 and t[i - 1] < INF:
                i -= 1
                break
            i >>= 1
        else:
            return None
        while i < size:
            i = 2 * i + 1
            if t[i] >= INF:
                i -= 1
        return i - size

    def argmin_at_least(self, lo: int) -> int | None:
        """Key ``>= lo`` holding the smallest value (leftmost on ties)."""
        t, size = self.t, self.size
        if lo >= size:
            return None
        i = lo + size
        best, node = t[i], i
        while i > 1:
            if not i & 1 and t[i + 1] < best:
                best, node = t[i + 1], i + 1
            i >>= 1
        if best >= INF:
            return None
        while node < size:
            node <<= 1
            if t[node] != best:
                node += 1
        return node - size


class BitKeys:
    """A set of non-empty integer keys in one Python int (bit ``k`` = key ``k``): the same queries as
    :class:`KeyTree` (values are ignored) at a fraction of the cost when no per-key value is needed."""

    __slots__ = ("bits",)

    def __init__(self, bits: int = 0) -> None:
        self.bits = bits

    def set(self, key: int, value: int) -> None:
        if value >= INF:
            self.bits &= ~(1 << key)
        else:
            self.bits |= 1 << key

    def first_at_least(self, lo: int) -> int | None:
        m = self.bits >> lo
        return lo + (m & -m).bit_length() - 1 if m else None

    def last_at_most(self, hi: int) -> int | None:
        if hi < 0:
            return None
        m = self.bits & ((2 << hi) - 1)
        return m.bit_length() - 1 if m else None


def sort_by_length_desc(lengths: np.ndarray, capacity: int) -> np.ndarray:
    """Indices sorted by (length descending, index ascending); a radix sort when capacity < 2**16."""
    key_dtype = np.uint16 if capacity < (1 << 16) else np.uint32
    key = lengths.astype(key_dtype)
    np.subtract(key_dtype(capacity), key, out=key)
    return np.argsort(key, kind="stable")


class HistogramBuilder:
    """Records placement events over the length histogram and builds the CSR plan from groups.

    Args:
        lengths: ``(N,)`` int64 costs, each in ``[1, capacity]``.
        capacity: pack capacity in tokens.
    """

    def __init__(self, lengths: np.ndarray, capacity: int) -> None:
        self.n = int(lengths.shape[0])
        self.capacity = capacity
        # the (length asc, index asc) order ``finalize`` lays out, and the histogram read off it
        self._sorted: np.ndarray | None
        self._sorted, counts = sort_by_length(lengths, capacity)
        self.counts: list[int] = counts.tolist()
        # Start of each length's block in that order.
        below = np.zeros(counts.shape[0], dtype=np.int64)
        np.cumsum(counts[:-1], out=below[1:])
        self.cursor: list[int] = below.tolist()
        self.n_bins = 0
        self.ev_bin: list[int] = []
        self.ev_g: list[int] = []
        self.ev_k: list[int] = []
        self.ev_src: list[int] = []
        self.ev_rev: list[bool] = []

    def event(self, length: int, bin_start: int, g: int, k: int, *, reverse: bool = False) -> int:
        """Each of packs ``bin_start .. bin_start+g-1`` receives ``k`` sequences of ``length``.

        With ``reverse`` the packs are served from the last to the first (MFFD's backward pass).
        Returns the event id.
        """
        self.ev_bin.append(bin_start)
        self.ev_g.append(g)
        self.ev_k.append(k)
        self.ev_src.append(self.cursor[length])
        self.ev_rev.append(reverse)
        self.cursor[length] += g * k
        return len(self.ev_k) - 1

    def new_bins(self, g: int) -> int:
        start = self.n_bins
        self.n_bins += g
        return start

    def finalize(self, groups: list[tuple[int, int, tuple[int, ...]]] | Chains) -> tuple[np.ndarray, np.ndarray]:
        """Turn final groups (``(start, g, events)`` tuples or :class:`Chains`) into ``(order, offsets)``;
        empty packs are dropped.

        Consumes ``groups`` and the recorded events (both are emptied). See :func:`._finalize.build_plan`.
        """
        events = (self.ev_bin, self.ev_g, self.ev_k, self.ev_src, self.ev_rev)
        self.ev_bin, self.ev_g, self.ev_k, self.ev_src, self.ev_rev = [], [], [], [], []
        if self._sorted is None:
            raise RuntimeError("packwise internal error: HistogramBuilder.finalize called twice (it consumes the plan)")
        sorted_idx, self._sorted = self._sorted, None
        return build_plan(groups, events, sorted_idx, self.capacity)


class GroupStore:
    """Groups of identical packs bucketed by free space.

    A group is a list ``[start, g, free, nseq, events]``. ``lifo`` buckets hand out the most recently
    stored group first (Krell et al.'s stacks); otherwise the group with the lowest start (lowest pack
    index) comes first, as in item-by-item FFD/BFD.
    """

    def __init__(self, capacity: int, *, lifo: bool = False, argmin: bool = False) -> None:
        # FFD needs "lowest start among keys >= x" (a min tree); the others only need non-empty keys.
        self.tree = KeyTree(capacity + 1) if argmin else BitKeys()
        self.lifo = lifo
        self.buckets: dict[int, list] = {}
        self.closed: list[list] = []

    def add(self, group: list, max_seqs: int) -> None:
        free = group[2]
        if free <= 0 or group[3] >= max_seqs:
            self.closed.append(group)
            return
        bucket = self.buckets.get(free)
        if bucket is None:
            bucket = self.buckets[free] = []
        if self.lifo:
            bucket.append(group)
            self.tree.set(free, 0)
        else:
            heapq.heappush(bucket, (group[0], group))
            self.tree.set(free, bucket[0][0])

    def pop(self, free: int) -> list:
        bucket = self.buckets[free]
        if self.lifo:
            group = bucket.pop()
        else:
            group = heapq.heappop(bucket)[1]
        if not bucket:
            del self.buckets[free]
            self.tree.set(free, INF)
        elif not self.lifo:
            self.tree.set(free, bucket[0][0])
        return group

    def all_groups(self) -> list[tuple[int, int, tuple[int, ...]]]:
        out = [(g[0], g[1], g[4]) for g in self.closed]
        for bucket in self.buckets.values():
            for item in bucket:
                g = item if self.lifo else item[1]
                out.append((g[0], g[1], g[4]))
        return out


def split_group(group: list, taken: int) -> list:
    """Cut the first ``taken`` packs off ``group`` (in place) and return them as a new group."""
    head = [group[0], taken, *group[2:]]
    group[0] += taken
    group[1] -= taken
    return head


class PresentLengths:
    """Remaining sequence counts per length (shared with a builder) with range queries over lengths."""

    def __init__(self, counts: list[int]) -> None:
        self.counts = counts
        present = np.packbits(np.asarray(counts) > 0, bitorder="little")
        self.tree = BitKeys(int.from_bytes(present.tobytes(), "little"))
        self.total = sum(counts)

    def largest_at_most(self, hi: int) -> int | None:
        return self.tree.last_at_most(hi)

    def smallest_at_least(self, lo: int) -> int | None:
        return self.tree.first_at_least(lo)

    def take(self, length: int, n: int) -> None:
        c = self.counts[length] - n
        self.counts[length] = c
        self.total -= n
        if not c:
            self.tree.set(length, INF)


def fill_pattern(present: PresentLengths, free: int, room: int, max_repeat: int) -> tuple[list, int]:
    """Fill packs with ``free`` space and ``room`` sequence slots by "largest remaining that fits".

    Fills one pack for real, then repeats the same pattern on up to ``max_repeat - 1`` more identical
    packs while the counts allow (a repeat is exactly what the next pack would choose, because counts
    only decrease). Returns ``(pattern, repeats)`` where pattern is ``[(length, multiplicity), ...]``
    in pick order (lengths strictly decreasing).
    """
    pattern: list[list[int]] = []
    while room > 0 and free > 0:
        length = present.largest_at_most(free)
        if length is None:
            break
        present.take(length, 1)
        if pattern and pattern[-1][0] == length:
            pattern[-1][1] += 1
        else:
            pattern.append([length, 1])
        free -= length
        room -= 1
    if not pattern:
        return [], 0
    counts = present.counts
    extra = max_repeat - 1
    for length, mult in pattern:
        extra = min(extra, counts[length] // mult)
    if extra:
        for length, mult in pattern:
            present.take(length, extra * mult)
    return pattern, 1 + extra
