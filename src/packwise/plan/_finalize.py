"""The CSR plan from the histogram engine's final groups: one sort of the lengths, then block copies.

The sequences are sorted once by (length ascending, index ascending) with :func:`._sort.sort_by_length`; the
events address that order through the builder's cursors (the start of each length's block, index ascending
inside it). A (group, event) block — ``g`` packs each taking ``k`` consecutive sequences of one length into
slots ``p .. p+k-1`` — is a strided 2-D copy: large blocks get one numpy assignment each, the many small
ones are gathered together in one vectorised pass, so the Python work stays proportional to the number of
large blocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain

import numpy as np


@dataclass
class Chains:
    """Final groups as event chains, in flat lists of Python ints (BFD's output: cheaper than tuples).

    ``groups`` holds 4 values per group — ``start, g, sequences per pack, last event`` — and ``events`` 4 per
    event — ``bin, k, src, parent`` (as :meth:`HistogramBuilder.event` records them; never reversed). Group
    ``i`` is packs ``start .. start+g-1`` holding, in slot order, the events ``chain(last)``, where
    ``chain(e) = chain(parent[e]) + (e,)`` and ``parent[e] == -1`` starts a chain.
    """

    groups: list
    events: list

    def tuples(self) -> list[tuple[int, int, tuple[int, ...]]]:
        """The groups as ``(start, g, events)`` tuples (the other placers' form)."""
        out = []
        parent = self.events[3::4]
        for i in range(0, len(self.groups), 4):
            start, g, _, e = self.groups[i : i + 4]
            events = []
            while e >= 0:
                events.append(e)
                e = parent[e]
            out.append((start, g, tuple(events[::-1])))
        return out

    def record(self, builder) -> None:
        """Append the events to ``builder``'s event lists (``ev_bin``, ``ev_g``, ...)."""
        _, g, ev, nev, _ = _chain_rows(self)
        packs = np.bincount(ev, weights=np.repeat(g, nev), minlength=len(self.events) // 4)
        builder.ev_bin += self.events[0::4]
        builder.ev_g += packs.astype(np.int64).tolist()
        builder.ev_k += self.events[1::4]
        builder.ev_src += self.events[2::4]
        builder.ev_rev += [False] * (len(self.events) // 4)


#: (group, event) blocks with at least this many sequences get their own strided numpy copy; smaller ones are
#: gathered together (a numpy call costs about as much as the vectorised gather of a few hundred sequences).
_BLOCK = 256


def build_plan(groups, events: tuple, sorted_idx: np.ndarray, capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """``(order, offsets)`` from final groups — ``(start, g, events)`` tuples with the event lists
    ``(bin, g, k, src, reverse)``, or :class:`Chains` — ; empty packs are dropped.

    ``sorted_idx`` is the ``(N,)`` order by (length ascending, index ascending) the events address
    (:func:`._sort.sort_by_length`). Consumes ``groups`` and the event lists (both are emptied), so that their
    Python objects are freed before the ``(N,)`` order is allocated.
    """
    n = int(sorted_idx.shape[0])
    # one row per (group, event) block, in pack order then slot order; events as (E, 4): bin, g, k, src
    if isinstance(groups, Chains):
        start, g, ev, nev, table = _chain_rows(groups)
        rev = None
        groups.groups.clear()
        groups.events.clear()
    else:
        groups.sort()
        nev = np.fromiter((len(e) for _, _, e in groups), dtype=np.int64, count=len(groups))
        ev = np.fromiter(chain.from_iterable(e for _, _, e in groups), dtype=np.int64, count=int(nev.sum()))
        start = np.fromiter((s for s, _, _ in groups), dtype=np.int64, count=len(groups))
        g = np.fromiter((x for _, x, _ in groups), dtype=np.int64, count=len(groups))
        table = np.array(events[:4], dtype=np.int64).reshape(4, -1).T
        rev = np.asarray(events[4], dtype=bool)[ev] if any(events[4]) else None
        groups.clear()
    for lst in events:
        lst.clear()
    # the Python objects are gone before the (N,) arrays come: bounded peak memory
    gid = np.repeat(np.arange(start.shape[0]), nev)
    e_bin, e_g, k, src = (table[ev, c] for c in range(4))
    tk = np.bincount(gid, weights=k, minlength=start.shape[0]).astype(np.int64)  # slots per pack of each group
    cum = np.cumsum(k) - k
    first = np.zeros(start.shape[0], dtype=np.int64)  # first row of each group
    np.cumsum(np.bincount(gid, minlength=start.shape[0])[:-1], out=first[1:])
    p0 = cum - cum[first[gid]]
    gsize = g * tk
    gdst = np.cumsum(gsize) - gsize
    if int(gsize.sum()) != n:  # internal invariant, not user input
        raise RuntimeError(f"packwise internal error: planned {int(gsize.sum())} of {n} sequences")
    sg, st = g[gid], start[gid]
    src += (st - e_bin if rev is None else np.where(rev, e_bin + e_g - st - sg, st - e_bin)) * k
    dst, rtk = gdst[gid], tk[gid]
    if rev is None:
        rev = np.zeros(k.shape[0], dtype=bool)
    del ev, gid, start, cum, first, e_bin, e_g, st, gsize, gdst, table
    order = np.empty(n, dtype=np.int64)
    big = sg * k >= _BLOCK
    rows = np.flatnonzero(big)
    for a in range(0, rows.shape[0], 1024):  # Python ints for 1,024 blocks at a time: bounded memory
        part = rows[a : a + 1024]
        for d, gg, t, p, kk, s, r in zip(*(c[part].tolist() for c in (dst, sg, rtk, p0, k, src, rev))):
            if r:  # served last pack first (MFFD's backward pass)
                order[d : d + gg * t].reshape(gg, t)[:, p : p + kk] = sorted_idx[s : s + gg * kk].reshape(gg, kk)[::-1]
            elif kk == t:  # the group's only event: one contiguous run
                order[d : d + gg * t] = sorted_idx[s : s + gg * kk]
            elif kk == 1:  # one slot per pack: a strided column
                order[d + p : d + gg * t : t] = sorted_idx[s : s + gg]
            else:
                order[d : d + gg * t].reshape(gg, t)[:, p : p + kk] = sorted_idx[s : s + gg * kk].reshape(gg, kk)
    small = np.flatnonzero(~big)
    if small.shape[0]:  # in chunks of at most max(N/8, 2**16) sequences: bounded temporaries
        step = max(n // 8, 1 << 16)
        ends = np.cumsum(sg[small] * k[small])
        cuts = np.searchsorted(ends, np.arange(step, int(ends[-1]), step), side="right")
        for rows in np.split(small, np.unique(cuts)):
            if rows.shape[0]:
                _gather_small(
                    order, sorted_idx, dst[rows] + p0[rows], sg[rows], rtk[rows], k[rows], src[rows], rev[rows]
                )
    del sorted_idx
    keep = tk > 0
    sizes = np.repeat(tk[keep], g[keep])
    offsets = np.zeros(sizes.shape[0] + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    return order, offsets


def _chain_rows(chains: Chains) -> tuple[np.ndarray, ...]:
    """``(start, g, events, events per group, event table)`` of :class:`Chains`: groups by first pack, each
    group's events in slot order, the event table ``(E, 4)``: bin, g (0: unused), k, src. The chains are walked
    from their last events back, one step for all groups at a time."""
    table = np.fromiter(chains.groups, dtype=np.int64, count=len(chains.groups)).reshape(-1, 4)
    table = table[np.argsort(table[:, 0])]
    events = np.fromiter(chains.events, dtype=np.int64, count=len(chains.events)).reshape(-1, 4)
    parent = events[:, 3]
    depth = np.ones(parent.shape[0], dtype=np.int64)  # events on the chain up to each event
    up = np.flatnonzero(parent >= 0)
    anc = parent[up]
    while up.shape[0]:
        depth[up] += 1
        anc = parent[anc]
        live = anc >= 0
        up, anc = up[live], anc[live]
    last = table[:, 3]
    size = np.where(last >= 0, depth[last], 0)
    pos = np.cumsum(size) - 1  # the row of each group's last event
    rows = np.empty(int(size.sum()), dtype=np.int64)
    cur, pos = last[size > 0], pos[size > 0]
    while cur.shape[0]:
        rows[pos] = cur
        cur = parent[cur]
        pos -= 1
        live = cur >= 0
        if not live.all():
            cur, pos = cur[live], pos[live]
    tab = np.zeros((events.shape[0], 4), dtype=np.int64)
    tab[:, 0], tab[:, 2], tab[:, 3] = events[:, 0], events[:, 1], events[:, 2]
    return table[:, 0], table[:, 1], rows, size, tab


def _gather_small(order, sorted_idx, dst, g, tk, k, src, rev) -> None:
    """Vectorised copy of many small (group, event) blocks, one row each: block slot ``j < k`` of pack
    ``b < g`` (``order[dst + b*tk + j]``) takes ``sorted_idx[src + b'*k + j]``, ``b' = g-1-b`` when ``rev``.

    Walks each slot column as a run of ``g`` values with constant steps (``tk`` in ``order``, ``±k`` in
    ``sorted_idx``) built by one ``cumsum`` each: six passes over the gathered sequences.
    """
    row = np.repeat(np.arange(k.shape[0]), k)  # one run per (row, slot)
    j = np.arange(row.shape[0], dtype=np.int64) - np.repeat(np.cumsum(k) - k, k)
    lens = g[row]
    d0, dstep = dst[row] + j, tk[row]
    s0 = src[row] + j + np.where(rev[row], (lens - 1) * k[row], 0)
    sstep = np.where(rev[row], -k[row], k[row])
    runs = np.cumsum(lens) - lens
    out = []
    for v0, step in ((d0, dstep), (s0, sstep)):
        delta = np.repeat(step, lens)
        last = v0 + (lens - 1) * step
        delta[runs] = v0 - np.concatenate([[0], last[:-1]])
        out.append(np.cumsum(delta, out=delta))
    order[out[0]] = sorted_idx[out[1]]
