"""The CSR plan from the histogram engine's final groups: one sort of the lengths, then block copies.

The sequences are sorted once by (length ascending, index ascending) with :func:`._sort.sort_by_length`; the
events address that order through the builder's cursors (the start of each length's block, index ascending
inside it). A (group, event) block — ``g`` packs each taking ``k`` consecutive sequences of one length into
slots ``p .. p+k-1`` — is a strided 2-D copy: large blocks get one numpy assignment each, the many small
ones are gathered together in one vectorised pass, so the Python work stays proportional to the number of
large blocks.
"""

from __future__ import annotations

from itertools import chain

import numpy as np

from ._sort import sort_by_length

#: (group, event) blocks with at least this many sequences get their own strided numpy copy; smaller ones are
#: gathered together (a numpy call costs about as much as the vectorised gather of a few hundred sequences).
_BLOCK = 256


def build_plan(groups: list, events: tuple, lengths: np.ndarray, capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """``(order, offsets)`` from final groups ``(start, g, events)`` and the event lists
    ``(bin, g, k, src, reverse)``; empty packs are dropped.

    Consumes ``groups`` and the event lists (both are emptied), so that their Python objects are freed before
    the ``(N,)`` arrays are allocated.
    """
    ev_bin, ev_g, ev_k, ev_src, ev_rev = events
    n = int(lengths.shape[0])
    groups.sort()
    # one row per (group, event) block, in pack order then slot order
    nev = [len(e) for _, _, e in groups]
    ev = np.fromiter(chain.from_iterable(e for _, _, e in groups), dtype=np.int64, count=sum(nev))
    gid = np.repeat(np.arange(len(groups)), nev)
    start = np.fromiter((s for s, _, _ in groups), dtype=np.int64, count=len(groups))
    g = np.fromiter((x for _, x, _ in groups), dtype=np.int64, count=len(groups))
    k = np.asarray(ev_k, dtype=np.int64)[ev]
    tk = np.bincount(gid, weights=k, minlength=len(groups)).astype(np.int64)  # slots per pack of each group
    cum = np.cumsum(k) - k
    first = np.zeros(len(groups), dtype=np.int64)  # first row of each group
    np.cumsum(np.bincount(gid, minlength=len(groups))[:-1], out=first[1:])
    p0 = cum - cum[first[gid]]
    gsize = g * tk
    gdst = np.cumsum(gsize) - gsize
    if int(gsize.sum()) != n:  # internal invariant, not user input
        raise RuntimeError(f"packwise internal error: planned {int(gsize.sum())} of {n} sequences")
    rev = np.asarray(ev_rev, dtype=bool)[ev]
    e_bin, e_g = np.asarray(ev_bin, dtype=np.int64)[ev], np.asarray(ev_g, dtype=np.int64)[ev]
    sg, st = g[gid], start[gid]
    src = np.asarray(ev_src, dtype=np.int64)[ev] + np.where(rev, e_bin + e_g - st - sg, st - e_bin) * k
    dst, rtk = gdst[gid], tk[gid]
    groups.clear()  # the Python objects go before the (N,) arrays come: bounded peak memory
    for lst in events:
        lst.clear()
    del ev, gid, start, cum, first, e_bin, e_g, st, gsize, gdst
    sorted_idx = sort_by_length(lengths, capacity)
    order = np.empty(n, dtype=np.int64)
    big = sg * k >= _BLOCK
    rows, chunk = np.flatnonzero(big), None
    for a in range(0, rows.shape[0], 1024):  # Python ints for 1,024 blocks at a time: bounded memory
        part = rows[a : a + 1024]
        for d, gg, t, p, kk, s, r in zip(*(c[part].tolist() for c in (dst, sg, rtk, p0, k, src, rev))):
            chunk = sorted_idx[s : s + gg * kk].reshape(gg, kk)
            order[d : d + gg * t].reshape(gg, t)[:, p : p + kk] = chunk[::-1] if r else chunk
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
    del sorted_idx, chunk  # the last block view kept sorted_idx alive
    keep = tk > 0
    sizes = np.repeat(tk[keep], g[keep])
    offsets = np.zeros(sizes.shape[0] + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    return order, offsets


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
