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
free >= length) group in O(log C); BFD (smallest free >= length) bisects one sorted list of group keys.
The plan is identical, element for element, to the item-by-item reference kept in ``tests/plan/reference.py``.

Complexity: one sort of N packed keys (``_sort.sort_by_length``) and O(N) copies, plus O(E log C) Python steps where
E, the number of events, depends on the distinct lengths and not on N. Deterministic; no sequence is
split or dropped.

Measured (``benchmarks/bench_plan.py``, lognormal(6.1, 1.1) lengths clipped to [1, 4096], C = 4096, this
2-core machine): N = 10 M — 1,852,744 packs for L1 = 1,852,702 (+0.0023 %), both FFD and BFD, the same count
as item-by-item BFD (seqpacker's reference run); N = 1 M — 185,640 for L1 = 185,636; chitchat (qwen2.5,
C = 4096) — 776 = L1. Times in ``benchmarks/README.md``.
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import chain
from typing import Literal, cast, overload

import numpy as np

from ._engine import GroupStore, HistogramBuilder, KeyTree, split_group
from ._finalize import Chains

Policy = Literal["first", "best", "best_lifo", "worst_lifo_one"]


@overload
def place_decreasing(builder: HistogramBuilder, *, max_seqs: int, policy: Literal["best"]) -> Chains: ...
@overload
def place_decreasing(
    builder: HistogramBuilder, *, max_seqs: int, policy: Literal["first", "best_lifo", "worst_lifo_one"]
) -> list: ...
def place_decreasing(builder: HistogramBuilder, *, max_seqs: int, policy: Policy) -> list | Chains:
    """Place every remaining sequence of ``builder.counts`` (longest first) into new or open packs.

    ``policy`` picks the group: ``first`` (FFD), ``best`` (BFD), ``best_lifo`` (LPFHP: best fit,
    most recent group on ties), ``worst_lifo_one`` (SPFHP: most free space, one sequence per pack per
    step). Returns the final groups for :meth:`HistogramBuilder.finalize` (:class:`Chains` for ``best``).
    """
    if policy == "best":
        return _place_best(builder, max_seqs)
    capacity = builder.capacity
    store = GroupStore(capacity, lifo=policy in ("best_lifo", "worst_lifo_one"), argmin=policy == "first")
    tree = store.tree
    keytree = cast(KeyTree, tree)  # argmin=True (policy "first") builds a KeyTree; only that branch uses it
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
                key = keytree.argmin_at_least(length)
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


def _place_best(builder: HistogramBuilder, max_seqs: int) -> Chains:
    """``place_decreasing(policy="best")`` with the group store inlined: the same events in the same order.

    The open groups are one sorted Python list of keys ``free << sh | start`` (``sh`` bits hold any pack
    index) ending in a sentinel, so "smallest free >= length, lowest first pack on ties" is one ``bisect`` and
    re-filing a group one slice insertion (a memmove; ``list.insert`` shifts one by one). A group that takes
    sequences of ``length`` is left with less than ``length`` free (or is closed), so it moves left of the
    cursor and one bisect per length serves every group the length visits. Lengths above C/2 never share a
    pack with each other: their packs and events (one per length) are opened in one pass. A group is
    ``[start, g, sequences per pack, last event]`` (see :class:`Chains`), found by its start; its free space
    lives in its key. The events are in the returned :class:`Chains`, not in ``builder``'s lists.
    """
    if builder.ev_k:
        raise RuntimeError("packwise internal error: best-fit placement needs a builder without events")
    capacity = builder.capacity
    counts, cursor = builder.counts, builder.cursor
    n_bins = builder.n_bins
    sh = max(builder.n, 1).bit_length()  # pack starts are < N (no pack is opened empty)
    mask = (1 << sh) - 1
    cnt = np.asarray(counts, dtype=np.int64)
    present = np.flatnonzero(cnt)[::-1]  # lengths, descending
    n_big = int(np.count_nonzero(present > capacity // 2))
    runs = zip(present.tolist(), cnt[present].tolist(), np.asarray(cursor, dtype=np.int64)[present].tolist())
    e = 0
    flat: list[int] = []  # events (bin, k, src, parent), 4 values each
    by_start: dict[int, list] = {}  # every group, open or closed
    keys: list[int] = []
    for _, (length, c, src) in zip(range(n_big), runs):  # free spaces grow as lengths fall: keys come sorted
        flat += (n_bins, 1, src, -1)
        by_start[n_bins] = [n_bins, c, 1, e]
        if length < capacity and max_seqs > 1:
            keys.append((capacity - length) << sh | n_bins)
        e += 1
        n_bins += c
    end = (capacity + 1) << sh
    keys.append(end)  # above every key: reached when no open pack fits
    for length, c, src in runs:  # the rest, each visiting the best-fitting groups in turn
        step = length << sh  # one sequence of this length, in key units
        i = bisect_left(keys, step)
        while c:
            key = keys[i]
            if key == end:  # no open pack fits: open q packs of k and one of the remainder
                k = min(capacity // length, max_seqs)
                q, r = divmod(c, k)
                if q:
                    flat += (n_bins, k, src, -1)
                    by_start[n_bins] = [n_bins, q, k, e]
                    e += 1
                    if k < max_seqs and k * length < capacity:
                        key = (capacity - k * length) << sh | n_bins
                        j = bisect_left(keys, key)
                        keys[j:j] = (key,)
                    n_bins += q
                if r:  # r < k: the pack keeps room
                    flat += (n_bins, r, src + q * k, -1)
                    by_start[n_bins] = [n_bins, 1, r, e]
                    e += 1
                    if r < max_seqs:
                        key = (capacity - r * length) << sh | n_bins
                        j = bisect_left(keys, key)
                        keys[j:j] = (key,)
                    n_bins += 1
                break
            start = key & mask
            group = by_start[start]
            g = group[1]
            k = (key >> sh) // length
            if max_seqs - group[2] < k:
                k = max_seqs - group[2]
            take = g * k
            if take > c:  # the run ends inside this group: its first q packs take k, the next one r
                e = _split_best(group, keys, i, c, k, step, flat, by_start, src, e, max_seqs, sh)
                src += c
                break
            flat += (start, k, src, group[3])
            src += take
            c -= take
            group[2] += k
            group[3] = e
            e += 1
            key -= k * step
            if key >> sh and group[2] < max_seqs:  # still room: re-file it left of the cursor
                j = bisect_left(keys, key, 0, i)
                if j == i:
                    keys[i] = key
                else:
                    del keys[i]
                    keys[j:j] = (key,)  # a memmove (list.insert shifts one by one)
                i += 1
            else:
                del keys[i]
    builder.n_bins = n_bins  # (``builder.cursor`` is not advanced: nothing reads it after placement)
    return Chains(list(chain.from_iterable(by_start.values())), flat)


def _split_best(group, keys, i, c, k, step, flat, by_start, src, e, max_seqs, sh) -> int:
    """The last ``c`` sequences of a length go to the first packs of ``group`` (key ``keys[i]``): its first
    ``q`` packs take ``k`` each, the next one the remaining ``r``; the rest of the group keeps its free space.
    Returns the next event id."""
    q, r = divmod(c, k)
    key, start, nseq, last = keys[i], group[0], group[2], group[3]
    heads = []
    for gg, kk in ((q, k), (1, r)) if r else ((q, k),):
        if gg:
            flat += (start, kk, src, last)
            src += gg * kk
            by_start[start] = [start, gg, nseq + kk, e]
            e += 1
            hkey = key - kk * step - group[0] + start
            if hkey >> sh and nseq + kk < max_seqs:
                heads.append(hkey)
            start += gg
    group[1] -= start - group[0]
    if group[1]:  # same free space, later start: the same place in ``keys``
        keys[i] = key - group[0] + start
        group[0] = start
        by_start[start] = group
    else:
        del keys[i]
    for hkey in heads:
        j = bisect_left(keys, hkey)
        keys[j:j] = (hkey,)
    return e
