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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate

import numpy as np
import torch

from ..constants import IGNORE_INDEX
from ._columns import MEDIA_KEYS, RESERVED, _collect, _Columns, as_tensor, validate_values  # noqa: F401  (re-exported)


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
    _segments: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False, compare=False)

    def segments(self) -> tuple[np.ndarray, np.ndarray]:
        """``(real, physical)`` int64 lengths of every segment, the tail (real 0) included."""
        if self._segments is None:
            real = self.cu_seqlens.diff().cpu().numpy().astype(np.int64)
            phys = self.cu_seqlens_padded.diff().cpu().numpy().astype(np.int64)
            if self.tail:
                real, phys = np.append(real, 0), np.append(phys, self.tail)
            object.__setattr__(self, "_segments", (real, phys))
        return self._segments

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
        out = {
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
    sequences: Sequence[Mapping],
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
        sequences: mappings with ``input_ids (L,)``; optional ``labels (L,)`` and/or ``loss_mask (L,)``, whose
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
        pad_values: padding value per extra column (default 0).
        labels_shifted: the convention of the pack's labels (output): False — HF, ``labels[t]`` is token
            ``t``; True — Megatron, ``labels[t]`` is the target of position ``t``. Rows are converted within
            each sequence; a Megatron row's last target cannot become an HF label and is refused.
        position_offset: first position of every sequence (2 for RoBERTa-style models).
        vocab_size: when given, every input id and label must be below it.

    Returns:
        A :class:`PackedSequence`. Without labels or loss mask, every token is a target.

    Raises:
        ValueError: an empty sequence, a column whose length differs from ``input_ids``, aligned total >
            ``pad_to``, ``alignment < 1``, a negative id (or one >= ``vocab_size``), a label that is neither
            -100 nor a token id, a ``loss_mask`` value other than 0/1, labels that look like the other
            convention, a Megatron target an HF pack would lose, tensors on different devices — naming the
            sequence index, column and numbers.
        TypeError: a column that cannot become a tensor (ragged, strings), float/bool ids, labels or positions.

    Example:
        >>> p = assemble_pack([{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5, 6]}])
        >>> p.position_ids.tolist(), p.labels.tolist(), p.cu_seqlens.tolist()
        ([0, 1, 2, 0, 1, 2], [-100, 2, 3, -100, 5, 6], [0, 3, 6])
        >>> q = assemble_pack([{"input_ids": [1] * 5}, {"input_ids": [2] * 7}], alignment=4)
        >>> q.cu_seqlens.tolist(), q.cu_seqlens_padded.tolist(), q.padding_mask.nonzero().flatten().tolist()
        ([0, 5, 12], [0, 8, 16], [5, 6, 7, 15])
    """
    if isinstance(alignment, bool) or not isinstance(alignment, int) or alignment < 1:
        raise ValueError(f"alignment must be an integer >= 1, got {alignment!r}")
    if not sequences:
        raise ValueError("assemble_pack needs at least one sequence")
    cols = _collect(sequences)
    lengths = np.asarray(cols.lengths, dtype=np.int64)
    n = lengths.shape[0]
    real_total = sum(cols.lengths)
    if alignment == 1:
        padded, aligned_total = lengths, real_total
    else:
        padded = (lengths + alignment - 1) // alignment * alignment
        aligned_total = int(padded.sum())
    total = aligned_total if pad_to is None else int(pad_to)
    if total < aligned_total:
        detail = f" ({real_total} real + {aligned_total - real_total} alignment)" if alignment > 1 else ""
        raise ValueError(f"pack holds {aligned_total} tokens{detail} > pad_to={pad_to}; plan with a capacity <= pad_to")
    tail = total - aligned_total
    cu = np.fromiter(accumulate(cols.lengths, initial=0), dtype=np.int32, count=n + 1)  # cheaper than np.cumsum at N≈4
    cu_padded = cu if padded is lengths else np.concatenate([[0], np.cumsum(padded)]).astype(np.int32)
    seg_len = np.append(padded, tail) if tail else padded
    seg_real = np.append(lengths, 0) if tail else lengths
    seq_idx = np.repeat(np.arange(seg_len.shape[0], dtype=np.int32), seg_len)
    pos_in_seg = _aranges(seg_len.tolist())
    if total == real_total:
        padding_mask = np.zeros(total, dtype=bool)
        dst = None
    else:
        padding_mask = pos_in_seg >= np.repeat(seg_real, seg_len)
        dst = torch.from_numpy(np.flatnonzero(~padding_mask)).to(cols.device)
    device = cols.device

    def place(values: torch.Tensor, fill) -> torch.Tensor:
        if dst is None:
            return values
        out = torch.full((total, *values.shape[1:]), fill, dtype=values.dtype, device=values.device)
        out[dst] = values
        return out

    starts = cu[:-1].astype(np.int64)
    labels = _labels(cols, starts, lengths, labels_shifted, label_pad_id)
    validate_values(cols, vocab_size=vocab_size, label_pad_id=label_pad_id, labels=labels)
    positions = _positions(cols, pos_in_seg, seq_idx, seg_real, dst, position_offset, n, device)
    pad_values = dict(pad_values or {})
    return PackedSequence(
        input_ids=place(cols.ids, pad_token_id) if cols.ids is not None else None,
        labels=place(labels, label_pad_id),
        position_ids=positions,
        cu_seqlens=_t(cu, device),
        cu_seqlens_padded=_t(cu_padded, device),
        max_seqlen=max(cols.lengths),
        seq_idx=_t(seq_idx, device),
        padding_mask=_t(padding_mask, device),
        total_tokens=total,
        columns={k: place(v, pad_values.get(k, 0)) for k, v in cols.extra.items()},
        metadata=cols.metadata,
        media=cols.media,
        labels_shifted=bool(labels_shifted),
        _segments=(seg_real, seg_len),
    )


_ARANGE = np.arange(1 << 16, dtype=np.int64)


def _aranges(lengths: list[int]) -> np.ndarray:
    """``concat(arange(n) for n in lengths)`` from slices of one cached arange (cheaper than repeat)."""
    global _ARANGE
    longest = max(lengths)
    if longest > _ARANGE.shape[0]:
        _ARANGE = np.arange(1 << longest.bit_length(), dtype=np.int64)
    return np.concatenate([_ARANGE[:n] for n in lengths]) if len(lengths) > 1 else _ARANGE[: lengths[0]].copy()


def _t(a: np.ndarray, device: torch.device) -> torch.Tensor:
    t = torch.from_numpy(a)
    return t if device.type == "cpu" else t.to(device)


def _labels(cols: _Columns, starts: np.ndarray, lengths: np.ndarray, shifted: bool, pad: int) -> torch.Tensor:
    """Labels in the pack's convention (``shifted``) from what each row declares it carries:

    - ``labels`` alone: HF labels, unshifted (``labels[t]`` is token ``t``, scored from the logits at ``t-1``);
    - ``labels`` + ``loss_mask``: a Megatron row (GPTDataset/SFT: ``labels = text[1:]``, ``loss_mask`` aligned
      with them, ``labels[t]`` is the target of position ``t``; the last one is a real target);
    - ``loss_mask`` alone: a per-token mask on the token that is predicted (HF/TRL ``completion_mask``);
    - neither: every next token is a target.

    Converting is lossless or refused: a Megatron row's last target has no slot in HF labels. Rows whose
    labels look like the other convention are refused naming the field and the fix."""
    ids = cols.ids
    n_rows = len(lengths)
    megatron = [lab is not None and mask is not None for lab, mask in zip(cols.labels, cols.masks)]
    if all(lab is not None for lab in cols.labels) and not any(megatron):
        hf = torch.cat(cols.labels)
        if hf.dtype != torch.int64 or hf.device != cols.device:
            hf = hf.to(device=cols.device, dtype=torch.int64, copy=True)
        elif len(cols.labels) == 1:
            hf = hf.clone()
    else:
        if ids is None and not all(lab is not None for lab in cols.labels):
            raise ValueError("sequences without input_ids need labels")
        hf = ids.clone() if ids is not None else torch.empty(int(lengths.sum()), dtype=torch.int64, device=cols.device)
        offset = 0
        for lab, mask, n in zip(cols.labels, cols.masks, cols.lengths):
            if lab is None and mask is None:
                offset += n
                continue
            part = hf[offset : offset + n]
            if lab is not None and mask is not None:
                part.fill_(pad)  # filled below from the Megatron labels
            elif lab is not None:
                part.copy_(lab.to(part.device, torch.int64))
            elif mask is not None:
                part.masked_fill_(~mask.to(device=part.device, dtype=torch.bool), pad)
            offset += n
    if ids is not None and any(lab is not None and not m for lab, m in zip(cols.labels, megatron)):
        _check_hf_rows(hf, ids, cols, starts, lengths, megatron, pad)
    last_targets = {}
    for i in (i for i in range(n_rows) if megatron[i]):
        start, n = int(starts[i]), int(lengths[i])
        lab = cols.labels[i].to(device=hf.device, dtype=torch.int64)
        lab = lab.masked_fill(~cols.masks[i].to(device=hf.device, dtype=torch.bool), pad)
        if ids is not None:
            _check_megatron_row(i, lab, ids[start : start + n], pad)
        hf[start + 1 : start + n] = lab[:-1]  # unshift within the row: lossless up to the last target
        if int(lab[-1]) != pad:
            if not shifted:
                raise ValueError(
                    f"sequence {i}: its last label ({int(lab[-1])}, loss_mask 1) is a real Megatron target (the "
                    "token after the last input id); HF labels have no slot for it and it would be lost. Keep "
                    "Megatron labels (PackingConfig labels='shifted', assemble_pack(labels_shifted=True)) or "
                    "append that token to input_ids"
                )
            last_targets[start + n - 1] = int(lab[-1])
    ends = starts + lengths - 1
    if shifted:  # out[t] = hf[t+1] within each row; the last token of a row predicts nothing (or its own target)
        out = torch.empty_like(hf)
        if hf.device.type == "cpu":
            o = out.numpy()
            o[:-1] = hf.numpy()[1:]
            o[ends] = pad
        else:
            out[:-1] = hf[1:]
            out[_t(ends, out.device)] = pad
        for pos, value in last_targets.items():
            out[pos] = value
        return out
    if hf.device.type == "cpu":
        hf.numpy()[starts] = pad  # no target crosses a sequence boundary
    else:
        hf[_t(starts, hf.device)] = pad
    return hf


def _check_hf_rows(hf, ids, cols, starts, lengths, megatron, pad) -> None:
    """Refuse ``labels``-only rows that look Megatron-shifted (``labels[t] == input_ids[t+1]``)."""
    if hf.device.type == "cpu":  # numpy: a few microseconds on the assemble hot path
        h, t = hf.numpy(), ids.numpy()
        m = (h != pad) & (h != t)
        if not m.any():
            return
        mismatch = torch.from_numpy(m)
    else:
        mismatch = (hf != pad) & (hf != ids)
    if not bool(mismatch.any()):
        return  # every HF target is its own token: the common case, one vectorised test
    for i, lab in enumerate(cols.labels):
        if lab is None or megatron[i]:
            continue
        start, n = int(starts[i]), int(lengths[i])
        row, tok = hf[start : start + n], ids[start : start + n]
        if n < 2 or not bool(mismatch[start : start + n].any()):
            continue
        tgt = row[:-1] != pad
        if bool(tgt.any()) and bool((row[:-1] == tok[1:])[tgt].all()):
            raise ValueError(
                f"sequence {i}: labels look Megatron-shifted (labels[t] == input_ids[t+1] at every target), but "
                "labels without loss_mask are read as HF labels (unshifted, labels[t] == input_ids[t]). A Megatron "
                "row (labels = text[1:]) declares itself with its loss_mask: add loss_mask (1 on every target); "
                "an HF row gives labels = input_ids with -100 where no loss"
            )


def _check_megatron_row(i: int, lab: torch.Tensor, tok: torch.Tensor, pad: int) -> None:
    """Refuse ``labels`` + ``loss_mask`` rows whose labels are HF labels (``labels[t] == input_ids[t]``)."""
    tgt = lab != pad
    if tok.shape[0] < 2 or int(tgt.sum()) < 2 or not bool((lab == tok)[tgt].all()):
        return
    nxt = tgt[:-1]
    if bool(nxt.any()) and bool((lab[:-1] == tok[1:])[nxt].all()):
        return  # a constant run: both readings give the same targets
    raise ValueError(
        f"sequence {i}: carries labels and loss_mask, which declares a Megatron row (labels = text[1:], "
        "loss_mask aligned with labels), but labels[t] == input_ids[t] at every target, as HF labels are. "
        "For HF rows drop loss_mask (put -100 in labels where it is 0); for Megatron rows give labels = text[1:]"
    )


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
