"""The fused path's layout: the segments of a whole batch from its sequence lengths.

``N`` sequences in ``P`` packs, ``T`` tokens in the row (padding included). Both functions return a
:class:`Layout` whose ``(T,)`` arrays (positions, ``seq_idx``, padding mask) are new and the caller's to
keep. :func:`plain_layout` is the common case (no alignment, no ``pad_to``: the segments are the sequences,
plus the batch padding): a dozen numpy calls in all, whatever ``N``. :func:`padded_layout` adds alignment
and tail padding (each pack's tail is one more segment, real length 0).
"""

from __future__ import annotations

from itertools import accumulate
from typing import NamedTuple

import numpy as np
import torch


class Layout(NamedTuple):
    total: int  #: tokens of the packs (the batch padding excluded)
    width: int  #: T: tokens in the row, the batch padding included
    extra: int  #: the batch padding (``pad_to_multiple_of``)
    padded: bool  #: alignment or tail padding inside the packs
    dst: torch.Tensor | None  #: ``(sum(lens),)`` int64 row position of every real token; None when padded is False
    seq_start: np.ndarray  #: ``(N,)`` int64 row position of every sequence's first token
    seq_stop: np.ndarray  #: ``(N,)`` int64 ``seq_start + lens``
    cu_real: np.ndarray  #: ``(M+1,)`` int32 cumulative real lengths of the M segments
    cu_padded: np.ndarray  #: ``(M+1,)`` int32 physical segment starts
    pack_tokens: np.ndarray  #: ``(P+1,)`` int32 token offset of every pack
    positions: np.ndarray  #: ``(T,)`` int64 position of every token in its segment
    seq_idx: np.ndarray  #: ``(T,)`` int32 segment of every token
    pad_mask: np.ndarray  #: ``(T,)`` bool, True on padding
    longest: int  #: longest physical segment
    longest_aligned: int  #: longest aligned sequence


_CUMSUM = np.add.accumulate  # the ufunc: ndarray.cumsum(out=...) costs microseconds more per call
_SEGMENTS = np.arange(1 << 12, dtype=np.int32)


class _Ranges(dict):
    """``{n: arange(n)}`` as views of one cached int64 arange, made on first use: the positions of a row are
    one ``np.concatenate`` of these (a slice per segment costs more than the copy of a short one)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.base = np.arange(size, dtype=np.int64)

    def __missing__(self, n: int) -> np.ndarray:
        if n > self.base.shape[0]:  # (never a short slice, whichever cache a thread reads)
            return np.arange(n, dtype=np.int64)
        view = self.base[:n]
        if len(self) < _MAX_VIEWS:  # (bounded: long-context data has many distinct lengths)
            self[n] = view
        return view


_MAX_VIEWS = 1 << 14  # ~2 MB of views at most


_RANGES = _Ranges(1 << 12)


def _positions(lengths: list[int], longest: int) -> np.ndarray:
    """``(sum(lengths),)`` int64: ``concat(arange(n) for n in lengths)``, new; ``longest = max(lengths)``."""
    global _RANGES
    ranges = _RANGES  # (read once: another thread may replace the cache, with a smaller one, meanwhile)
    if longest > ranges.base.shape[0]:
        ranges = _Ranges(1 << longest.bit_length())
        if ranges.base.shape[0] > _RANGES.base.shape[0]:
            _RANGES = ranges
    return np.concatenate(list(map(ranges.__getitem__, lengths)))


def _seq_idx(counts: np.ndarray | list[int]) -> np.ndarray:
    """``(T,)`` int32: segment ``i`` repeated ``counts[i]`` times."""
    global _SEGMENTS
    m = len(counts)
    if m > _SEGMENTS.shape[0]:
        _SEGMENTS = np.arange(1 << m.bit_length(), dtype=np.int32)
    return _SEGMENTS[:m].repeat(counts)


def plain_layout(sizes: list[int], lens_list: list[int], multiple: int) -> Layout:
    """No alignment, no ``pad_to``: the segments are the sequences, then the batch padding when there is one.

    Seven numpy calls that allocate (the int64 segment ends, ``cu_padded``, its copy, ``pack_tokens``,
    positions, ``seq_idx``, the padding mask), each array written once; ``seq_start``/``seq_stop`` are views.

    Args:
        sizes: ``(P,)`` sequences per pack (each >= 1). lens_list: ``(N,)`` tokens per sequence (each >= 1).
        multiple: ``pad_to_multiple_of``."""
    n = len(lens_list)
    ends = list(accumulate(lens_list, initial=0))  # N + 1 Python ints: cheaper than numpy calls at this size
    total = ends[-1]
    extra = -total % multiple
    width = total + extra
    longest = max(lens_list)
    pad_mask = np.zeros(width, dtype=bool)
    if extra:
        ends.append(width)  # the batch padding: one more segment, real length 0
        phys_list = [*lens_list, extra]
        pad_mask[total:] = True
        longest_phys = max(longest, extra)
    else:
        phys_list = lens_list
        longest_phys = longest
    cum = np.array(ends)  # int64 (numpy's fancy indexing is several times slower with int32 indices)
    cu_padded = cum.astype(np.int32)  # the physical segment starts, then the row's end
    cu_real = cu_padded.copy()
    if extra:
        cu_real[-1] = total
    return Layout(
        total, width, extra, False, None, cum[:n], cum[1 : n + 1], cu_real, cu_padded,
        cu_padded.take(list(accumulate(sizes, initial=0))), _positions(phys_list, longest_phys), _seq_idx(phys_list),
        pad_mask, longest_phys, longest,
    )  # fmt: skip


def padded_layout(sizes: list[int], lens_list: list[int], pad_to: int | None, alignment: int, multiple: int):
    """Alignment and ``pad_to``: every sequence padded to a multiple of ``alignment``, every pack to ``pad_to``
    (its tail one more segment, real length 0), then the batch padding. None when a pack exceeds ``pad_to``
    (the two-step path raises with the numbers)."""
    n, n_packs = len(lens_list), len(sizes)
    lens = np.array(lens_list, dtype=np.int64)
    bounds = np.zeros(n_packs + 1, dtype=np.int64)
    _CUMSUM(sizes, out=bounds[1:])
    aligned = lens if alignment == 1 else (lens + alignment - 1) // alignment * alignment
    pack_aligned = np.add.reduceat(aligned, bounds[:-1])
    if pad_to is None:
        pack_total = pack_aligned
    else:
        if pack_aligned.max() > pad_to:
            return None
        pack_total = np.full(n_packs, pad_to, dtype=np.int64)
    tails = pack_total - pack_aligned
    total = int(pack_total.sum())
    extra = -total % multiple
    padded = alignment > 1 or bool(tails.any())
    if not padded:  # segments are the sequences (+ the batch padding)
        real = np.append(lens, 0) if extra else lens
        phys = np.append(lens, extra) if extra else lens
        seg_start = np.zeros(phys.shape[0] + 1, dtype=np.int64)
        _CUMSUM(phys, out=seg_start[1:])
        seq_start = seg_start[:n]
    else:
        # segments in batch order: each pack's sequences, then its tail when it has one; then the batch padding
        has_tail = tails > 0
        n_seg_pack = np.asarray(sizes, dtype=np.int64) + has_tail
        seg_bounds = np.zeros(n_packs + 1, dtype=np.int64)
        _CUMSUM(n_seg_pack, out=seg_bounds[1:])
        m = int(seg_bounds[-1])
        is_seq = np.ones(m, dtype=bool)
        is_seq[seg_bounds[1:][has_tail] - 1] = False
        real = np.zeros(m + (1 if extra else 0), dtype=np.int64)
        phys = np.zeros_like(real)
        real[:m][is_seq] = lens
        phys[:m][is_seq] = aligned
        phys[:m][~is_seq] = tails[has_tail]
        if extra:
            phys[m] = extra
        seg_start = np.zeros(phys.shape[0] + 1, dtype=np.int64)
        _CUMSUM(phys, out=seg_start[1:])
        seq_start = seg_start[:-1][:m][is_seq]  # batch offset of every sequence
    phys_list = phys.tolist()
    positions = _positions(phys_list, max(phys_list))
    if padded:
        pad_mask = positions >= real.repeat(phys)
        if extra:
            pad_mask[total:] = True
        dst = torch.from_numpy(np.flatnonzero(~pad_mask))
    else:
        pad_mask = np.zeros(total + extra, dtype=bool)
        pad_mask[total:] = True
        dst = None
    cu_real = np.zeros(real.shape[0] + 1, dtype=np.int32)
    cu_real[1:] = real.cumsum()
    pack_tokens = np.zeros(n_packs + 1, dtype=np.int32)
    pack_tokens[1:] = pack_total.cumsum()
    return Layout(
        total, total + extra, extra, padded, dst, seq_start, seq_start + lens, cu_real,
        seg_start.astype(np.int32), pack_tokens, positions, _seq_idx(phys), pad_mask, max(phys_list),
        int(aligned.max()),
    )  # fmt: skip
