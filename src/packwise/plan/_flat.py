"""The numpy seam every executor of a plan builds on: flat per-token columns plus ``cu_seqlens``.

A plan says which sequences share a pack; executing it means laying their tokens out back to back. Three
executors do that — the Arrow writer (``pipeline._table.PackedColumns``), ``assemble_pack`` (torch, one
pack) and the collators (a batch of packs) — and all three take their geometry from here:

- :func:`gather_index`: the plan's order over CSR samples -> one gather index for every per-token column
  and the real boundaries ``cu_seqlens`` of the result;
- :func:`segment_layout`: real lengths + alignment + ``pad_to`` -> where every token goes in a padded row
  (``cu_seqlens_padded``, segment of each token, padding mask);
- :func:`mask_boundaries`: the boundary-label rule — no target crosses a document boundary.

numpy only (``plan/`` imports neither torch nor pyarrow); :func:`mask_boundaries` also writes into torch
tensors through their own indexing, without importing torch.

Notation: ``N`` sequences, ``T`` tokens, ``M`` segments (sequences plus a tail of padding).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate
from typing import Literal, overload

import numpy as np

from ..constants import IGNORE_INDEX


@overload
def mask_boundaries(
    labels, starts, lengths=None, *, shifted: bool = False, ignore_index: int = IGNORE_INDEX, count: Literal[True]
) -> int: ...
@overload
def mask_boundaries(
    labels, starts, lengths=None, *, shifted: bool = False, ignore_index: int = IGNORE_INDEX, count: bool = False
) -> int | None: ...
def mask_boundaries(
    labels,
    starts,
    lengths=None,
    *,
    shifted: bool = False,
    ignore_index: int = IGNORE_INDEX,
    count: bool = False,
) -> int | None:
    """The boundary-label rule, in place: no target crosses a document boundary.

    HF labels are unshifted (the loss scores ``labels[t]`` from the logits at ``t-1``), so the first label of
    every document would be predicted from the previous document: it is set to ``ignore_index``. Megatron
    (shifted) labels hold at ``t`` the target of position ``t``, so the last label of every document is the
    one that would cross: with ``shifted=True`` that one is set. Every executor of a plan applies the rule
    through this function (the Arrow writer, ``assemble_pack``, ``flatten_padded_batch``, the pipeline's
    read step).

    Args:
        labels: ``(T,)`` integer labels — a numpy array or a torch tensor (CPU: written through a numpy view;
            other devices: indexed with a tensor on that device).
        starts: ``(N,)`` position in ``labels`` of every document's first token (``cu_seqlens[:-1]`` for
            flat columns, ``cu_seqlens_padded[:-1]`` in a padded row).
        lengths: ``(N,)`` real tokens per document; needed for ``shifted`` and when a document may be
            empty (an empty document has no label to mask and is skipped).
        shifted: mask the last label of every document instead of the first.
        ignore_index: the label that carries no loss.
        count: return how many targets the rule removed (labels that were not ``ignore_index``).

    Returns:
        The number of targets masked with ``count``, else None.

    Raises:
        ValueError: ``shifted`` without ``lengths``.

    Example:
        >>> labels = np.array([1, 2, 3, -100, 5])
        >>> mask_boundaries(labels, [0, 3], count=True), labels.tolist()
        (1, [-100, 2, 3, -100, 5])
        >>> shifted = np.array([2, 3, 9, 5, 9])
        >>> mask_boundaries(shifted, [0, 3], [3, 2], shifted=True, count=True), shifted.tolist()
        (2, [2, 3, -100, 5, -100])
    """
    at = np.asarray(starts, dtype=np.int64)
    if lengths is not None:
        lengths = np.asarray(lengths, dtype=np.int64)
        if shifted:
            at = at + lengths - 1
        if not lengths.all():
            at = at[lengths > 0]
    elif shifted:
        raise ValueError("mask_boundaries(shifted=True) needs the documents' lengths (their last labels)")
    if isinstance(labels, np.ndarray):
        target = labels
    elif labels.device.type == "cpu":
        target = labels.numpy()  # a view: writing it writes the tensor
    else:
        index = labels.new_tensor(at)
        masked = int((labels[index] != ignore_index).sum()) if count else None
        labels[index] = ignore_index
        return masked
    masked = int(np.count_nonzero(target[at] != ignore_index)) if count else None
    target[at] = ignore_index
    return masked


def gather_index(offsets: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lay sequences ``order`` of CSR samples back to back: one gather index for every per-token column.

    Args:
        offsets: ``(N+1,)`` int64; sequence ``i`` is tokens ``offsets[i]:offsets[i+1]`` of the samples.
        order: ``(N,)`` the sequences in pack order (``PackPlan.order``).

    Returns:
        ``(index, cu_seqlens)``: ``(T,)`` int64 with ``column[index]`` the packed column, and ``(N+1,)`` int64
        real boundaries of the sequences in it.

    Example:
        >>> index, cu = gather_index(np.array([0, 3, 5, 6]), np.array([2, 0, 1]))
        >>> index.tolist(), cu.tolist()
        ([5, 0, 1, 2, 3, 4], [0, 1, 4, 6])
    """
    lengths = np.diff(offsets)[order]
    cu = np.zeros(lengths.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=cu[1:])
    index = np.arange(int(cu[-1]), dtype=np.int64) - np.repeat(cu[:-1] - offsets[:-1][order], lengths)
    return index, cu


_ARANGE = np.arange(1 << 16, dtype=np.int64)


def aranges(lengths: list[int]) -> np.ndarray:
    """``concat(arange(n) for n in lengths)`` from slices of one cached arange (cheaper than repeat)."""
    global _ARANGE
    longest = max(lengths)
    if longest > _ARANGE.shape[0]:
        _ARANGE = np.arange(1 << longest.bit_length(), dtype=np.int64)
    return np.concatenate([_ARANGE[:n] for n in lengths]) if len(lengths) > 1 else _ARANGE[: lengths[0]].copy()


@dataclass(frozen=True, eq=False)
class SegmentLayout:
    """Where the tokens of ``N`` sequences go in one row of ``total`` tokens (see :func:`segment_layout`).

    Attributes:
        cu_seqlens: ``(N+1,)`` int32 cumulative *real* lengths.
        cu_seqlens_padded: ``(N+1,)`` int32 *physical* starts (after per-sequence alignment).
        seg_real: ``(M,)`` int64 real tokens per segment (the tail: 0).
        seg_len: ``(M,)`` int64 physical tokens per segment.
        seq_idx: ``(total,)`` int32 segment of every token.
        pos_in_seg: ``(total,)`` int64 position of every token in its segment.
        padding_mask: ``(total,)`` bool, True on alignment and tail padding.
        dst: ``(real total,)`` int64 row position of every real token, or None when there is no padding.
        total: tokens in the row.
    """

    cu_seqlens: np.ndarray
    cu_seqlens_padded: np.ndarray
    seg_real: np.ndarray
    seg_len: np.ndarray
    seq_idx: np.ndarray
    pos_in_seg: np.ndarray
    padding_mask: np.ndarray
    dst: np.ndarray | None
    total: int


_MAX_ROW = 2**31 - 1  # cu_seqlens are int32


def segment_layout(lengths: list[int], *, alignment: int = 1, pad_to: int | None = None) -> SegmentLayout:
    """The physical layout of one pack: every sequence padded to a multiple of ``alignment``, then a tail of
    padding up to ``pad_to`` (one more segment, real length 0).

    Args:
        lengths: ``N`` real lengths (>= 1) in pack order.
        alignment: pad every sequence to a multiple of this many tokens (an integer in [1, 2**31 - 1]).
        pad_to: tokens in the row (None: the aligned total).

    Raises:
        ValueError: the aligned sequences hold more than ``pad_to`` tokens; ``alignment`` is not an integer in
            [1, 2**31 - 1]; ``pad_to`` above 2**31 - 1. TypeError: ``pad_to`` is not an
            integer (``True``, ``"5"``, ``5.0`` are refused).

    Example:
        >>> lay = segment_layout([5, 7], alignment=4, pad_to=20)
        >>> lay.cu_seqlens.tolist(), lay.cu_seqlens_padded.tolist(), lay.seg_len.tolist()
        ([0, 5, 12], [0, 8, 16], [8, 8, 4])
        >>> np.flatnonzero(lay.padding_mask).tolist()
        [5, 6, 7, 15, 16, 17, 18, 19]
    """
    if pad_to is not None and (isinstance(pad_to, (bool, np.bool_)) or not isinstance(pad_to, (int, np.integer))):
        raise TypeError(f"pad_to={pad_to!r} is a {type(pad_to).__name__}; give an integer (tokens per pack) or None")
    if pad_to is not None and pad_to > _MAX_ROW:
        raise ValueError(f"pad_to={pad_to} > {_MAX_ROW} tokens, the most a row's int32 cu_seqlens can address")
    if (type(alignment) is not int or alignment != 1) and (
        isinstance(alignment, (bool, np.bool_)) or not isinstance(alignment, (int, np.integer))
        or not 1 <= alignment <= _MAX_ROW
    ):  # fmt: skip
        raise ValueError(f"alignment must be an integer in [1, {_MAX_ROW}] (tokens), got {alignment!r}")
    n = len(lengths)
    real = np.asarray(lengths, dtype=np.int64)
    real_total = sum(lengths)
    if alignment == 1:
        padded, aligned_total = real, real_total
    else:
        padded = (real + alignment - 1) // alignment * alignment
        aligned_total = int(padded.sum())
    total = aligned_total if pad_to is None else int(pad_to)
    if total < aligned_total:
        detail = f" ({real_total} real + {aligned_total - real_total} alignment)" if alignment > 1 else ""
        raise ValueError(f"pack holds {aligned_total} tokens{detail} > pad_to={pad_to}; plan with a capacity <= pad_to")
    tail = total - aligned_total
    cu = np.fromiter(accumulate(lengths, initial=0), dtype=np.int32, count=n + 1)  # cheaper than np.cumsum at N≈4
    cu_padded = cu if padded is real else np.concatenate([[0], np.cumsum(padded)]).astype(np.int32)
    seg_len = np.append(padded, tail) if tail else padded
    seg_real = np.append(real, 0) if tail else real
    seq_idx = np.repeat(np.arange(seg_len.shape[0], dtype=np.int32), seg_len)
    pos_in_seg = aranges(seg_len.tolist())
    if total == real_total:
        padding_mask, dst = np.zeros(total, dtype=bool), None
    else:
        padding_mask = pos_in_seg >= np.repeat(seg_real, seg_len)
        dst = np.flatnonzero(~padding_mask)
    return SegmentLayout(cu, cu_padded, seg_real, seg_len, seq_idx, pos_in_seg, padding_mask, dst, total)
