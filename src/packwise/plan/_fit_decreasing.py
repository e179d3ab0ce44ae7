"""First-fit decreasing (FFD) and best-fit decreasing (BFD), planned on the length histogram.

Source: Johnson, Demers, Ullman, Garey & Graham, "Worst-case performance bounds for simple one-dimensional
packing algorithms", SIAM J. Computing 3(4), 1974; the tight bound FFD(I) <= 11/9 OPT(I) + 6/9 is
Dósa, "The tight bound of first fit decreasing bin-packing algorithm is FFD(I) <= 11/9 OPT(I) + 6/9",
ESCAPE 2007. BFD has the same worst-case bound.

Definition (item by item): visit the sequences by length descending, ties by index ascending; put each
into the lowest-index pack with enough room (FFD) or into the pack with the least room that still fits,
ties to the lowest index (BFD); open a new pack when none fits. ``max_sequences_per_pack`` closes a pack
when it holds that many sequences.

Histogram fast path: identical sequences go to identical packs, so a run of ``c`` sequences of one
length is placed on whole groups of identical packs at once: each pack of the selected group takes
``k = min(free // length, max_seq - n)`` of them, in pack order, which is exactly what the
item-by-item rule does (the first pack stays the best/first fit until it is full). Groups live in
buckets keyed by free space; a segment tree over free space finds the first (FFD: lowest start among
free >= length; BFD: smallest free >= length) group in O(log C). The plan is identical, element for
element, to the item-by-item reference kept in ``tests/plan/reference.py``.

Complexity: O(N) for the histogram and a radix argsort (C < 65,536), plus O(E log C) Python steps where
E, the number of events, depends on the distinct lengths and not on N. Deterministic; no sequence is
split or dropped.

Measured (``benchmarks/bench_plan.py``, lognormal(6.1, 1.1) lengths clipped to [1, 4096], C = 4096, this
2-core machine): N = 10 M — 1,852,744 packs for L1 = 1,852,702 (+0.0023 %), both FFD and BFD, the same count
as item-by-item BFD (seqpacker's reference run); N = 1 M — 185,640 for L1 = 185,636; chitchat (qwen2.5,
C = 4096) — 776 = L1. Times in ``benchmarks/README.md``.
"""

from __future__ import annotations

from heapq import heappop, heappush
from typing import Literal

from ._engine import GroupStore, HistogramBuilder, split_group

Policy = Literal["first", "best", "best_lifo", "worst_lifo_one"]


def place_decreasing(builder: HistogramBuilder, *, max_seqs: int, policy: Policy) -> list:
    """Place every remaining sequence of ``builder.counts`` (longest first) into new or open packs.

    ``policy`` picks the group: ``first`` (FFD), ``best`` (BFD), ``best_lifo`` (LPFHP: best fit,
    most recent group on ties), ``worst_lifo_one`` (SPFHP: most free space, one sequence per pack per
    step). Returns the final groups for :meth:`HistogramBuilder.finalize`.
    """
    if policy == "best":
        return _place_best(builder, max_seqs)
    capacity = builder.capacity
    store = GroupStore(capacity, lifo=policy in ("best_lifo", "worst_lifo_one"), argmin=policy == "first")
    tree = store.tree
    counts = builder.counts
    one = policy == "worst_lifo_one"
    # hot loop: builder.event and store.add/pop are inlined through local aliases
    ev_bin, ev_g, ev_k, ev_src, ev_rev, cursor = (
        builder.ev_bin, builder.ev_g, builder.ev_k, builder.ev_src, builder.ev_rev, builder.cursor,
    )  # fmt: skip
    add = store.add
    for length in range(capacity, 0, -1):
        c = counts[length]
        while c:
            if policy == "first":
                key = tree.argmin_at_least(length)
            elif one:
                key = tree.last_at_most(capacity)
                if key is not None and key < length:
                    key = None
            else:
                key = tree.first_at_least(length)
            if key is None:
                k = 1 if one else min(capacity // length, max_seqs)
                q, r = divmod(c, k)
                if q:
                    start = builder.new_bins(q)
                    e = builder.event(length, start, q, k)
                    store.add([start, q, capacity - k * length, k, (e,)], max_seqs)
                if r:
                    start = builder.new_bins(1)
                    e = builder.event(length, start, 1, r)
                    store.add([start, 1, capacity - r * length, r, (e,)], max_seqs)
                break
            group = store.pop(key)
            g = group[1]
            k = 1 if one else min(group[2] // length, max_seqs - group[3])
            if g * k <= c:
                e = len(ev_k)
                ev_bin.append(group[0])
                ev_g.append(g)
                ev_k.append(k)
                ev_src.append(cursor[length])
                ev_rev.append(False)
                cursor[length] += g * k
                group[2] -= k * length
                group[3] += k
                group[4] = (*group[4], e)
                add(group, max_seqs)
                c -= g * k
                continue
            q, r = divmod(c, k)
            if q:
                head = split_group(group, q)
                _take(builder, head, length, q, k)
                store.add(head, max_seqs)
            if r:
                head = split_group(group, 1)
                _take(builder, head, length, 1, r)
                store.add(head, max_seqs)
            if group[1]:
                store.add(group, max_seqs)
            c = 0
    return store.all_groups()


def _take(builder: HistogramBuilder, group: list, length: int, g: int, k: int) -> None:
    e = builder.event(length, group[0], g, k)
    group[2] -= k * length
    group[3] += k
    group[4] = (*group[4], e)


def _place_best(builder: HistogramBuilder, max_seqs: int) -> list:
    """``place_decreasing(policy="best")`` with the group store inlined: the same events in the same order.

    Open groups live in heaps (by first pack) keyed by free space; the non-empty free spaces are the bits of
    one Python int, so "smallest free >= length" is a shift and a lowest-set-bit. Lengths above C/2 skip the
    query: every open pack then holds a sequence longer than C/2, so none has room for another.
    """
    capacity = builder.capacity
    counts, cursor = builder.counts, builder.cursor
    ev_bin, ev_g, ev_k, ev_src, ev_rev = builder.ev_bin, builder.ev_g, builder.ev_k, builder.ev_src, builder.ev_rev
    buckets: dict[int, list] = {}
    closed: list[list] = []
    bits = 0
    n_bins = builder.n_bins
    half = capacity // 2
    for length in range(capacity, 0, -1):
        c = counts[length]
        while c:
            m = bits >> length if length <= half else 0
            if m:
                key = length + (m & -m).bit_length() - 1
                bucket = buckets[key]
                group = heappop(bucket)[1]
                if not bucket:
                    del buckets[key]
                    bits ^= 1 << key
                g = group[1]
                k = min(group[2] // length, max_seqs - group[3])
                if g * k <= c:
                    parts = ((group, g, k),)
                    c -= g * k
                else:
                    q, r = divmod(c, k)
                    parts = []
                    if q:
                        parts.append((split_group(group, q), q, k))
                    if r:
                        parts.append((split_group(group, 1), 1, r))
                    if group[1]:
                        bits = _file(buckets, closed, group, max_seqs, bits)
                    c = 0
            else:  # no open pack fits: open q packs of k and one of the remainder
                k = min(capacity // length, max_seqs)
                q, r = divmod(c, k)
                parts = []
                if q:
                    parts.append(([n_bins, q, capacity, 0, ()], q, k))
                    n_bins += q
                if r:
                    parts.append(([n_bins, 1, capacity, 0, ()], 1, r))
                    n_bins += 1
                c = 0
            for group, g, k in parts:
                ev_bin.append(group[0])
                ev_g.append(g)
                ev_k.append(k)
                ev_src.append(cursor[length])
                ev_rev.append(False)
                cursor[length] += g * k
                group[2] -= k * length
                group[3] += k
                group[4] = (*group[4], len(ev_k) - 1)
                bits = _file(buckets, closed, group, max_seqs, bits)
    builder.n_bins = n_bins
    out = [(g[0], g[1], g[4]) for g in closed]
    out.extend((g[0], g[1], g[4]) for bucket in buckets.values() for _, g in bucket)
    return out


def _file(buckets: dict, closed: list, group: list, max_seqs: int, bits: int) -> int:
    """Put ``group`` back in the bucket of its free space (or close it); returns the updated key bits."""
    free = group[2]
    if free <= 0 or group[3] >= max_seqs:
        closed.append(group)
        return bits
    bucket = buckets.get(free)
    if bucket is None:
        buckets[free] = [(group[0], group)]
        return bits | (1 << free)
    heappush(bucket, (group[0], group))
    return bits
