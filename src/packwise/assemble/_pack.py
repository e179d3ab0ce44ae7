"""``assemble_pack``: sequences -> one THD pack, every per-token column aligned by construction.

Notation: ``N`` sequences in the pack, ``T`` tokens in it after padding, ``L_i`` tokens in sequence ``i``.

Layout of a pack with alignment 4 and ``pad_to=20`` for sequences of 5 and 7 tokens::

    token      a a a a a . . . b b b b b b b . T T T T      (. alignment padding, T tail padding)
    position   0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3
    seq_idx    0 0 0 0 0 0 0 0 1 1 1 1 1 1 1 1 2 2 2 2
    padding    . . . . . x x x . . . . . . . x x x x x
    cu_seqlens [0, 5, 12]          cu_seqlens_padded [0, 8, 16]      total_tokens 20

Positions restart at ``position_offset`` for every sequence and keep counting through its alignment
padding; the tail forms one pseudo-segment whose positions are an arange (never zeros, which
position-based packing detection would read as one-token documents).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import torch

from ..constants import IGNORE_INDEX
from ..plan import segment_layout  # the numpy seam every executor of a plan builds on
from ._columns import MEDIA_KEYS, RESERVED, _collect, _Columns, as_tensor, flat_columns, validate_values  # noqa: F401  (re-exported)
from ._labels import row_labels
from ._options import (
    check_fill,
    check_options,
    check_pad_columns,
    check_pad_token_id,
    check_position_offset,
    check_tokens,
    positive_int,
)


@dataclass(frozen=True, eq=False)
class PackedSequence:
    """One pack in THD layout (a single row of ``T`` tokens holding ``N`` sequences).

    Attributes:
        input_ids: ``(T,)`` int64, or None for pipeline stages that carry no tokens.
        labels: ``(T,)`` int64; -100 = no loss. Unshifted HF labels: the first label of every sequence is
            -100; ``labels_shifted`` (Megatron): the last one is. Padding is -100.
        position_ids: ``(T,)`` int64, or ``(3, T)`` for MRoPE.
        cu_seqlens: ``(N+1,)`` int32 cumulative *real* lengths.
        cu_seqlens_padded: ``(N+1,)`` int32 cumulative lengths after per-sequence alignment; sequence ``i``
            starts at token ``cu_seqlens_padded[i]`` (Transformer Engine's THD convention).
        max_seqlen: longest real sequence, in tokens.
        seq_idx: ``(T,)`` int32 segment of each token; the tail padding is segment ``N``.
        padding_mask: ``(T,)`` bool, True on alignment and tail padding.
        total_tokens: T.
        columns: other per-token columns, each ``(T, ...)`` with its own dtype.
        metadata: per-sequence non-tensor values (lists of length N), e.g. sample keys.
        media: per-sample tensors that are not per token — ``pixel_values (patches, D)``, ``image_grid_thw
            (images, 3)`` (and the video twins) — concatenated in sequence order.
        labels_shifted: the label convention of ``labels`` (False: HF, unshifted; True: Megatron, shifted).
        multi_token_prediction: built for Megatron MTP (``PackingStream(multi_token_prediction=True)``):
            :func:`to_packed_seq_params` then gives MTP's layout by default.

    Example:
        >>> from packwise.assemble import assemble_pack
        >>> pack = assemble_pack([{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5]}])
        >>> pack.input_ids.tolist(), pack.labels.tolist(), pack.position_ids.tolist(), pack.total_tokens
        ([1, 2, 3, 4, 5], [-100, 2, 3, -100, 5], [0, 1, 2, 0, 1], 5)
    """

    input_ids: torch.Tensor | None
    labels: torch.Tensor
    position_ids: torch.Tensor
    cu_seqlens: torch.Tensor
    cu_seqlens_padded: torch.Tensor
    max_seqlen: int
    seq_idx: torch.Tensor
    padding_mask: torch.Tensor
    total_tokens: int
    columns: dict[str, torch.Tensor] = field(default_factory=dict)
    metadata: dict[str, list] = field(default_factory=dict)
    media: dict[str, torch.Tensor] = field(default_factory=dict)
    labels_shifted: bool = False
    multi_token_prediction: bool = False
    _segments: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_flat(
        cls,
        columns: Mapping[str, np.ndarray | torch.Tensor],
        cu_seqlens,
        *,
        metadata: Mapping[str, list] | None = None,
        pad_to: int | None = None,
        alignment: int = 1,
        pad_token_id: int = 0,
        position_offset: int = 0,
        vocab_size: int | None = None,
    ) -> PackedSequence:
        """One pack from flat per-token columns and real boundaries — the numpy seam a packed row already is
        (a row of ``packwise pack`` output), without cutting it into sequences first. Identical to
        :func:`assemble_pack` on the sequences ``columns[k][cu_seqlens[i]:cu_seqlens[i+1]]``.

        Args:
            columns: ``input_ids (T,)``, HF ``labels (T,)`` (unshifted; -100 = no loss), other per-token
                columns ``(T, ...)``; numpy arrays or tensors. No ``loss_mask``, ``position_ids`` or media
                (give those rows to :func:`assemble_pack`).
            cu_seqlens: ``(N+1,)`` cumulative real lengths, from 0 to T, every sequence >= 1 token.
            metadata: per-sequence values (lists of length N), e.g. ``{"source_index": [...]}``.
            pad_to, alignment, pad_token_id, position_offset, vocab_size: as :func:`assemble_pack`.

        Raises:
            ValueError: boundaries that are not ``0 = cu[0] < cu[1] < ... = T``, a column of another length, a
                ``loss_mask``/``position_ids``/media column, metadata without one value per sequence, and what
                :func:`assemble_pack` raises.

        Example:
            >>> p = PackedSequence.from_flat({"input_ids": np.array([1, 2, 3, 4, 5])}, [0, 3, 5], alignment=4)
            >>> p.labels.tolist(), p.cu_seqlens_padded.tolist(), p.position_ids.tolist()
            ([-100, 2, 3, -100, -100, 5, -100, -100], [0, 4, 8], [0, 1, 2, 3, 0, 1, 2, 3])
        """
        alignment = positive_int(alignment, "alignment")
        check_pad_token_id(pad_token_id, vocab_size)
        check_position_offset(position_offset)
        check_tokens(pad_to, "pad_to")
        check_tokens(alignment, "alignment")
        cu = np.asarray(cu_seqlens, dtype=np.int64).reshape(-1)
        tensors = {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in columns.items()}
        ref = tensors.get("input_ids", tensors.get("labels"))
        total = ref.shape[0] if ref is not None else None
        if cu.shape[0] < 2 or cu[0] != 0 or cu[-1] != total or (np.diff(cu) < 1).any():
            raise ValueError(
                f"cu_seqlens {cu.tolist()} must rise from 0 to the {total} tokens of the columns, every sequence "
                ">= 1 token"
            )
        meta = {k: list(v) for k, v in (metadata or {}).items()}
        bad = next((k for k, v in meta.items() if len(v) != cu.shape[0] - 1), None)
        if bad is not None:
            raise ValueError(f"metadata {bad!r} has {len(meta[bad])} values for {cu.shape[0] - 1} sequences")
        cols = flat_columns(tensors, np.diff(cu).tolist(), meta)
        return _execute(
            cols, pad_to=pad_to, alignment=alignment, pad_token_id=pad_token_id, label_pad_id=IGNORE_INDEX,
            pad_values=None, labels_shifted=False, position_offset=position_offset, vocab_size=vocab_size,
        )  # fmt: skip

    def segments(self) -> tuple[np.ndarray, np.ndarray]:
        """``(real, physical)`` int64 lengths of every segment, the tail (real 0) included."""
        segments = self._segments
        if segments is None:
            real = self.cu_seqlens.diff().cpu().numpy().astype(np.int64)
            phys = self.cu_seqlens_padded.diff().cpu().numpy().astype(np.int64)
            if self.tail:
                real, phys = np.append(real, 0), np.append(phys, self.tail)
            segments = (real, phys)
            object.__setattr__(self, "_segments", segments)
        return segments

    @property
    def num_sequences(self) -> int:
        """N."""
        return self.cu_seqlens.shape[0] - 1

    @property
    def lengths(self) -> torch.Tensor:
        """``(N,)`` int32 real lengths."""
        return self.cu_seqlens.diff()

    @property
    def max_seqlen_padded(self) -> int:
        """Longest aligned sequence, in tokens."""
        return int(self.segments()[1][: self.num_sequences].max())

    @property
    def tail(self) -> int:
        """Tokens of tail padding after the last aligned sequence."""
        if self._segments is not None:
            return int(self._segments[1].sum() - self._segments[1][: self.num_sequences].sum())
        return self.total_tokens - int(self.cu_seqlens_padded[-1])

    @property
    def loss_mask(self) -> torch.Tensor:
        """``(T,)`` bool, True where a label carries loss."""
        return self.labels != IGNORE_INDEX

    def to_dict(self) -> dict:
        """Every field as a flat dict (extra columns at top level, ``metadata`` nested)."""
        out: dict[str, Any] = {
            "input_ids": self.input_ids,
            "labels": self.labels,
            "position_ids": self.position_ids,
            "cu_seqlens": self.cu_seqlens,
            "cu_seqlens_padded": self.cu_seqlens_padded,
            "max_seqlen": self.max_seqlen,
            "seq_idx": self.seq_idx,
            "padding_mask": self.padding_mask,
            "total_tokens": self.total_tokens,
            **self.columns,
            **self.media,
        }
        if self.input_ids is None:
            del out["input_ids"]
        if self.metadata:
            out["metadata"] = self.metadata
        return out


def assemble_pack(
    sequences: Iterable[Mapping],
    *,
    pad_to: int | None = None,
    alignment: int = 1,
    pad_token_id: int = 0,
    label_pad_id: int = IGNORE_INDEX,
    pad_values: Mapping[str, float] | None = None,
    labels_shifted: bool = False,
    position_offset: int = 0,
    vocab_size: int | None = None,
) -> PackedSequence:
    """Concatenate sequences into one THD pack (the plan decided membership; this only executes it).

    Args:
        sequences: mappings (any iterable: a generator is read once) with ``input_ids (L,)``; optional
            ``labels (L,)`` and/or ``loss_mask (L,)``, whose
            presence declares the row's convention: ``labels`` alone are HF labels (unshifted), ``labels`` +
            ``loss_mask`` a Megatron row (``labels = text[1:]``, mask aligned with them), ``loss_mask`` alone a
            mask on the predicted token (docs/megatron.md); optional ``position_ids`` ``(L,)`` or MRoPE
            ``(3, L)``; any other per-token column ``(L, ...)`` of any dtype. Non-array values (strings,
            numbers) go to ``metadata``. Tensors, numpy arrays or lists; the output lives on the device of
            the first sequence's tensors.
        pad_to: total tokens T of the pack; the rest after the aligned sequences is tail padding.
        alignment: pad each sequence to a multiple of this many tokens (see ``plan.alignment_multiple``).
        pad_token_id: ``input_ids`` value on padding.
        label_pad_id: ``labels`` value on padding and at boundaries.
        pad_values: padding value per extra column (default 0); each must fit the column's dtype in every
            sequence. Not for what packwise pads itself: ``labels`` only -100, ``input_ids`` only
            ``pad_token_id``, no produced name (``padding_mask``, ``position_ids``, ...).
        labels_shifted: the convention of the pack's labels (output): False — HF, ``labels[t]`` is token
            ``t``; True — Megatron, ``labels[t]`` is the target of position ``t``. Rows are converted within
            each sequence; a Megatron row's last target cannot become an HF label and is refused.
        position_offset: first position of every sequence (2 for RoBERTa-style models), in
            ``[0, 2**31 - 1]``.
        vocab_size: when given, every input id and label must be below it.

    Returns:
        A :class:`PackedSequence`. Without labels or loss mask, every token is a target.

    Raises:
        ValueError: an empty sequence, a column whose length differs from ``input_ids``, aligned total >
            ``pad_to``, ``alignment < 1``, ``pad_to`` or ``alignment`` above 2**31 - 1 tokens (cu_seqlens are
            int32), a negative ``position_offset`` or one above 2**31 - 1, a negative id (or one >=
            ``vocab_size``), a label that is neither -100 nor a token id, a ``loss_mask`` value other than 0/1,
            labels that look like the other convention, a Megatron target an HF pack would lose, tensors on
            different devices — naming the sequence index, column and numbers.
        TypeError: a column that cannot become a tensor (ragged, strings), float/bool ids, labels or positions;
            a ``pad_token_id``, ``label_pad_id`` or ``position_offset`` that is not an integer (ValueError: beyond
            int64); a pad value that is not a number (ValueError: outside its column's dtype).

    Example:
        >>> p = assemble_pack([{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5, 6]}])
        >>> p.position_ids.tolist(), p.labels.tolist(), p.cu_seqlens.tolist()
        ([0, 1, 2, 0, 1, 2], [-100, 2, 3, -100, 5, 6], [0, 3, 6])
        >>> q = assemble_pack([{"input_ids": [1] * 5}, {"input_ids": [2] * 7}], alignment=4)
        >>> q.cu_seqlens.tolist(), q.cu_seqlens_padded.tolist(), q.padding_mask.nonzero().flatten().tolist()
        ([0, 5, 12], [0, 8, 16], [5, 6, 7, 15])
    """
    alignment = positive_int(alignment, "alignment")
    pad_values = check_options(
        pad_token_id=pad_token_id, label_pad_id=label_pad_id, position_offset=position_offset, pad_values=pad_values,
        pad_to=pad_to, alignment=alignment, vocab_size=vocab_size,
    )  # fmt: skip
    if not isinstance(sequences, (Sequence, Mapping, torch.Tensor, np.ndarray)):  # a generator: read it once
        try:
            sequences = list(sequences)
        except TypeError:
            raise TypeError(
                f"sequences is a {type(sequences).__name__}; pass a list of sequence mappings (each with input_ids)"
            ) from None
    if not sequences:
        raise ValueError("assemble_pack needs at least one sequence")
    return _execute(
        _collect(cast("Sequence[Mapping]", sequences)), pad_to=pad_to, alignment=alignment, pad_token_id=pad_token_id,
        label_pad_id=label_pad_id, pad_values=pad_values, labels_shifted=labels_shifted,
        position_offset=position_offset, vocab_size=vocab_size,
    )  # fmt: skip


def _execute(
    cols: _Columns, *, pad_to, alignment, pad_token_id, label_pad_id, pad_values, labels_shifted, position_offset,
    vocab_size,
) -> PackedSequence:  # fmt: skip
    """The one executor of a pack: the gathered sequences (``_Columns``: flat per-token columns + lengths) laid
    out by :func:`~packwise.plan._flat.segment_layout`, labels by the boundary-label rule."""
    lay = segment_layout(cols.lengths, alignment=alignment, pad_to=pad_to)
    lengths, n, total = lay.seg_real[: len(cols.lengths)], len(cols.lengths), lay.total
    dst = None if lay.dst is None else torch.from_numpy(lay.dst).to(cols.device)
    device = cols.device

    def place(values: torch.Tensor, fill) -> torch.Tensor:
        if dst is None:
            return values
        out = torch.full((total, *values.shape[1:]), fill, dtype=values.dtype, device=values.device)
        out[dst] = values
        return out

    starts = lay.cu_seqlens[:-1].astype(np.int64)
    labels = row_labels(cols, starts, lengths, labels_shifted, label_pad_id)
    validate_values(cols, vocab_size=vocab_size, label_pad_id=label_pad_id, labels=labels)
    positions = _positions(cols, lay.pos_in_seg, lay.seq_idx, lay.seg_real, dst, position_offset, n, device)
    pad_values = dict(pad_values or {})
    check_pad_columns(pad_values, cols.extra)
    for name in pad_values.keys() & cols.extra.keys():  # the pad value fits the column in every sequence
        for dtype in cols.dtypes.get(name, (cols.extra[name].dtype,)):
            check_fill(pad_values[name], dtype, name)
    return PackedSequence(
        input_ids=place(cols.ids, pad_token_id) if cols.ids is not None else None,
        labels=place(labels, label_pad_id),
        position_ids=positions,
        cu_seqlens=_t(lay.cu_seqlens, device),
        cu_seqlens_padded=_t(lay.cu_seqlens_padded, device),
        max_seqlen=max(cols.lengths),
        seq_idx=_t(lay.seq_idx, device),
        padding_mask=_t(lay.padding_mask, device),
        total_tokens=total,
        columns={k: place(v, pad_values.get(k, 0)) for k, v in cols.extra.items()},
        metadata=cols.metadata,
        media=cols.media,
        labels_shifted=bool(labels_shifted),
        _segments=(lay.seg_real, lay.seg_len),
    )


def _t(a: np.ndarray, device: torch.device) -> torch.Tensor:
    t = torch.from_numpy(a)
    return t if device.type == "cpu" else t.to(device)


def _positions(cols, pos_in_seg, seq_idx, seg_real, dst, offset, n, device) -> torch.Tensor:
    if all(p is None for p in cols.positions):
        return _t(pos_in_seg + offset if offset else pos_in_seg, device)
    mrope = any(p is not None and p.dim() == 2 for p in cols.positions)
    parts = []
    for p, length in zip(cols.positions, cols.lengths):
        p = torch.arange(offset, offset + length) if p is None else p
        p = p.to(device=device, dtype=torch.int64)
        parts.append(p.expand(3, -1) if mrope and p.dim() == 1 else p)
    real = torch.cat(parts, dim=-1)
    if dst is None:
        return real
    # padding: alignment gaps keep counting after the sequence's largest position; the tail is an arange
    last = np.array([int(p.max()) for p in parts], dtype=np.int64)
    has_tail = seg_real.shape[0] > n
    seg_last = np.append(last, offset - 1) if has_tail else last
    seg = seq_idx.astype(np.int64)
    fill = seg_last[seg] + 1 + pos_in_seg - seg_real[seg]
    if has_tail:
        tail = seg == n
        fill[tail] = offset + pos_in_seg[tail]
    fill_t = _t(fill, device)
    out = fill_t.expand(3, -1).clone() if mrope else fill_t.clone()
    out[..., dst] = real
    return out
