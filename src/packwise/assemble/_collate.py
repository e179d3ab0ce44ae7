"""``collate_packs``: packs -> one batch whose columns and types are decided over the whole batch.

A column present in any pack is a tensor in the batch, filled with its pad value where a pack lacks it,
so a text-only pack first in a batch can never turn ``mm_token_type_ids`` into a list. Each pack's slice
of the batch is identical under any permutation of the packs.

Segments: every real sequence is a segment; a pack's tail padding (and the batch's own padding to
``pad_to_multiple_of``) is one more segment with real length 0, so ``cu_seqlens`` (real lengths) and
``cu_seqlens_padded`` (physical) have the same size and the physical segments tile every token.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Literal, cast

import numpy as np
import torch

from ..constants import IGNORE_INDEX
from ._batch import PackedBatch
from ._labels import Labels, check_labels, shift_labels, unshift_labels
from ._options import check_fill, check_pad_columns, check_pad_token_id, check_pad_values, check_tokens, positive_int
from ._pack import PackedSequence
from ._static import pad_segments

Layout = Literal["thd", "padded"]
#: Optional per-token fields ``collate_packs(emit=...)`` can leave out (``PackingConfig.emit``).
EMIT = ("position_ids", "padding_mask", "seq_idx")


def _column_specs(packs: Sequence[PackedSequence], pad_values: dict) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    specs: dict[str, tuple[tuple[int, ...], torch.dtype]] = {}
    for i, p in enumerate(packs):
        for name, col in p.columns.items():
            shape, dtype = tuple(col.shape[1:]), col.dtype
            if name in pad_values:  # (the batch's promoted dtype holds whatever every pack's holds)
                check_fill(pad_values[name], dtype, name)
            if name in specs:
                if specs[name][0] != shape:
                    raise ValueError(
                        f"column {name!r}: per-token shape {shape} in pack {i} differs from {specs[name][0]} "
                        "in an earlier pack"
                    )
                dtype = torch.promote_types(specs[name][1], dtype)
            specs[name] = (shape, dtype)
    return dict(sorted(specs.items()))


def _segments(p: PackedSequence) -> tuple[list[int], list[int]]:
    """(real, physical) length of every segment of a pack, tail included."""
    real, phys = p.segments()
    return real.tolist(), phys.tolist()


def _tail_positions(start: int, n: int, mrope: bool) -> torch.Tensor:
    t = torch.arange(start, start + n, dtype=torch.int64)
    return t.expand(3, -1) if mrope else t


def collate_packs(
    packs: Sequence[PackedSequence],
    *,
    layout: Layout = "thd",
    pad_to_multiple_of: int = 1,
    pad_values: Mapping[str, float] | None = None,
    pad_token_id: int = 0,
    labels: Labels | None = None,
    pack_width: int | None = None,
    emit: Collection[str] = EMIT,
    mrope: bool | None = None,
    max_seqlen: Literal["int", "tensor"] = "int",
    max_segments: int | None = None,
) -> PackedBatch:
    """Batch packs for training.

    Args:
        packs: P :class:`PackedSequence` objects (from ``assemble_pack`` or ``PackedParquetDataset``).
        layout: ``"thd"`` — one row ``[1, ΣT]``; ``"padded"`` — ``[P, S]`` rows, ``S`` the longest pack.
        pad_to_multiple_of: round the row length (thd: ΣT; padded: S) up to a multiple of this (at most 2**31 - 1).
        pad_values: pad value per extra column for packs that lack it and for batch padding (default 0), as
            :func:`~packwise.assemble.assemble_pack` checks it (refused: ``labels`` other than -100, a value
            outside a pack's column dtype, ...).
        pad_token_id: ``input_ids`` value on batch padding.
        labels: the label convention of the batch: ``"hf"`` (unshifted; HF Transformers), ``"shifted"``
            (Megatron: ``labels[t]`` is the target of position ``t``; the batch then carries ``tokens``
            instead of ``input_ids`` — None on label-only pipeline stages — and a float32 ``loss_mask``), or
            None to keep the packs' own convention. Packs are converted within each document, never across
            (see ``packwise.assemble.shift_labels``).
        pack_width: pad every pack with tail padding to exactly this many tokens (fixed-width packs for
            pipeline parallelism and CUDA graphs; ``PackingConfig.fixed_width``), or None.
        emit: which of ``position_ids``, ``padding_mask``, ``seq_idx`` to emit (``PackingConfig.emit``).
        mrope: force 3-row MRoPE position ids (True; text-only packs get three identical rows), refuse them
            (False), or follow the packs (None).
        max_seqlen: ``"int"`` — ``max_seqlen``, ``max_seqlen_padded``, ``max_length_q/k`` as Python ints (what
            HF and megatron-core's ``PackedSeqParams`` take); ``"tensor"`` — as 0-d int32 tensors, for pipelines
            that broadcast every batch value across tensor-parallel ranks as tensors (Megatron-LM's
            ``get_batch_on_this_tp_rank``); ``PackingConfig.consumer.max_seqlen``.
        max_segments: ``cu_seqlens(_padded)`` get exactly ``max_segments + 1`` entries (per row if padded) by
            repeating the last boundary: one shape for a compiled model (``PackingConfig.max_segments``; _static).

    Returns:
        A :class:`~packwise.assemble.PackedBatch` (a dict; its keys are ``packwise.assemble.BATCH_KEYS``).
        Tensors: ``input_ids``, ``labels``, ``seq_idx`` (int32), ``padding_mask`` (bool) and extra columns
        as ``[1, T]`` (thd) or ``[P, S]`` (padded) (``[..., *trailing]`` for multi-dim columns);
        ``position_ids`` ``[1, T]`` / ``[P, S]`` or MRoPE ``[3, 1, T]`` / ``[3, P, S]`` (text-only packs get
        three identical rows when any pack is MRoPE); ``cu_seqlens`` / ``cu_seqlens_padded`` (int32; thd:
        ``(M+1,)`` over all M segments; padded: ``[P, maxM+1]`` per row, repeated last value);
        ``cu_seq_lens_q/k`` (int32 physical segment boundaries over the flattened tokens, the keys HF
        flash-attention reads); ``num_sequences`` ``[P]`` int32; ``cu_pack_tokens`` ``(P+1,)`` int32 token
        offset of each pack in the flattened batch. Python ints: ``max_length_q/k`` (longest physical
        segment), ``max_seqlen`` (longest real sequence), ``max_seqlen_padded``, ``total_tokens``.
        ``layout`` (str), ``labels_shifted`` (bool: the convention of ``labels``), ``multi_token_prediction``
        (True, only from MTP packs: :func:`to_packed_seq_params` reads it). ``metadata``: a dict
        of per-pack lists of per-sequence values (non-tensor data stays a list). Media (``pixel_values``,
        ``image_grid_thw``, ...) concatenated in pack order.

    Raises:
        ValueError: no packs, a column whose per-token shape differs between packs, input_ids in some
            packs only, an unknown layout, ``pad_to_multiple_of < 1``, an unknown ``labels`` or ``emit``
            name, packs of mixed label conventions with ``labels=None``, a pack longer than ``pack_width``,
            MRoPE packs with ``mrope=False``, more segments than ``max_segments``, packs that mix
            ``multi_token_prediction``.

    Example:
        >>> from packwise.assemble import assemble_pack
        >>> a = assemble_pack([{"input_ids": [1, 2]}])
        >>> b = assemble_pack([{"input_ids": [3, 4, 5], "mm_token_type_ids": [0, 1, 1]}])
        >>> batch = collate_packs([a, b])
        >>> batch["input_ids"].tolist(), batch["mm_token_type_ids"].tolist(), batch["cu_seq_lens_q"].tolist()
        ([[1, 2, 3, 4, 5]], [[0, 0, 0, 1, 1]], [0, 2, 5])
    """
    packs = list(packs)
    if not packs:
        raise ValueError("collate_packs needs at least one pack")
    for i, p in enumerate(packs):
        if not isinstance(p, PackedSequence):
            raise TypeError(
                f"pack {i} is a {type(p).__name__}; collate_packs takes PackedSequence objects (assemble_pack)"
            )
    odd = next((i for i, p in enumerate(packs) if p.labels.device != packs[0].labels.device), None)
    if odd is not None:
        raise ValueError(
            f"pack {odd} is on {packs[odd].labels.device} but pack 0 is on {packs[0].labels.device}; collate packs on "
            "one device (assemble on the CPU and move the batch)"
        )
    if layout not in ("thd", "padded"):
        raise ValueError(f"unknown layout {layout!r}; use 'thd' or 'padded'")
    pad_to_multiple_of = positive_int(pad_to_multiple_of, "pad_to_multiple_of")
    check_tokens(pad_to_multiple_of, "pad_to_multiple_of")
    has_ids = {p.input_ids is not None for p in packs}
    if len(has_ids) > 1:
        raise ValueError("input_ids present in some packs but not others")
    unknown = sorted(set(emit) - set(EMIT))
    if unknown:
        raise ValueError(f"emit names {unknown}; collate_packs can leave out only {list(EMIT)}")
    if labels is None:
        conventions = {p.labels_shifted for p in packs}
        if len(conventions) > 1:
            raise ValueError(
                "packs mix label conventions (some assembled with labels_shifted=True, some without); "
                "pass labels='hf' or labels='shifted' to convert them"
            )
        shifted = conventions.pop()
    else:
        shifted = check_labels(labels) == "shifted"
    mtp = {p.multi_token_prediction for p in packs}  # MTP packs (PackingStream) mark the batch
    if len(mtp) > 1:
        raise ValueError("packs mix multi_token_prediction=True and False; build all of them with one PackingConfig")
    check_pad_token_id(pad_token_id)
    pad_values = check_pad_values(pad_values, pad_token_id)
    if pack_width is not None:
        packs = [_widen(p, pack_width, i, pad_token_id, pad_values) for i, p in enumerate(packs)]
    specs = _column_specs(packs, pad_values)
    check_pad_columns(pad_values, specs)
    has_mrope = any(p.position_ids.dim() == 2 for p in packs)
    if mrope is False and has_mrope:
        raise ValueError("packs carry MRoPE position ids (3, T) but mrope=False (consumer.mrope); set mrope=True")
    mrope = has_mrope or bool(mrope)
    rows = [_row(p, specs, mrope, pad_values, shifted, i) for i, p in enumerate(packs)]
    meta_keys = sorted({k for p in packs for k in p.metadata})
    metadata = {k: [p.metadata.get(k, [None] * p.num_sequences) for p in packs] for k in meta_keys}
    pad_id = {"input_ids": pad_token_id, "labels": IGNORE_INDEX, "padding_mask": True, **pad_values}
    if layout == "thd":
        batch = _thd(packs, rows, mrope, pad_to_multiple_of, pad_id)
    else:
        batch = _padded(packs, rows, mrope, pad_to_multiple_of, pad_id)
    ids = batch.pop("input_ids") if has_ids.pop() else None
    if shifted:  # Megatron-LM's names: tokens, labels, loss_mask (float, 1 = target)
        batch["tokens"] = ids
        batch["loss_mask"] = (batch["labels"] != IGNORE_INDEX).float()  # float32, 1 exactly where a target is
    elif ids is not None:
        batch["input_ids"] = ids
    for name in EMIT:
        if name not in emit:
            del batch[name]
    batch["labels_shifted"] = shifted
    if mtp.pop():
        batch["multi_token_prediction"] = True
    if max_seqlen == "tensor":
        for key in ("max_seqlen", "max_seqlen_padded", "max_length_q", "max_length_k"):
            batch[key] = torch.tensor(batch[key], dtype=torch.int32)
    elif max_seqlen != "int":
        raise ValueError(f"max_seqlen={max_seqlen!r}; use 'int' or 'tensor'")
    pad_segments(batch, max_segments)
    batch.update(_media(packs))
    if metadata:
        batch["metadata"] = metadata
    return cast(
        "PackedBatch", batch
    )  # PackedBatch: its fixed keys plus the rows' own columns (TypedDict cannot declare extra keys)


def _media(packs: Sequence[PackedSequence]) -> dict[str, torch.Tensor]:
    """Per-sample media (pixel values, grids) concatenated in pack order; a pack without it adds 0 rows."""
    out = {}
    for name in sorted({k for p in packs for k in p.media}):
        present = [p.media[name] for p in packs if name in p.media]
        shapes = {tuple(t.shape[1:]) for t in present}
        if len(shapes) > 1:
            raise ValueError(f"media {name!r}: trailing shapes differ across packs: {sorted(shapes)}")
        out[name] = torch.cat(present)
    return out


def _widen(p: PackedSequence, width: int, index: int, pad_token_id: int, pad_values) -> PackedSequence:
    """``p`` with tail padding up to ``width`` tokens (a tail it already has is extended)."""
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise ValueError(f"pack_width must be an integer >= 1, got {width!r}")
    extra = width - p.total_tokens
    if extra < 0:
        raise ValueError(
            f"pack {index} holds {p.total_tokens} tokens > pack_width={width}; plan with capacity <= {width}"
        )
    if extra == 0:
        return p
    start = int(p.position_ids[..., -1].max()) + 1 if p.tail else 0

    def pad(t: torch.Tensor, fill) -> torch.Tensor:
        return torch.cat([t, torch.full((extra, *t.shape[1:]), fill, dtype=t.dtype, device=t.device)])

    tail = _tail_positions(start, extra, p.position_ids.dim() == 2).to(p.position_ids.device)
    return dataclasses.replace(
        p,
        input_ids=pad(p.input_ids, pad_token_id) if p.input_ids is not None else None,
        labels=pad(p.labels, IGNORE_INDEX),
        position_ids=torch.cat([p.position_ids, tail], dim=-1),
        seq_idx=pad(p.seq_idx, p.num_sequences),
        padding_mask=pad(p.padding_mask, True),
        total_tokens=width,
        columns={k: pad(v, pad_values.get(k, 0)) for k, v in p.columns.items()},
        _segments=None,
    )


def _convert(p: PackedSequence, t: torch.Tensor, shifted: bool, fill, index: int = 0) -> torch.Tensor:
    if p.labels_shifted == shifted:
        return t
    if not shifted:  # shifted -> HF: the last target of a segment has no HF slot; refuse rather than lose it
        seg = p.seq_idx.long()
        last = torch.ones_like(seg, dtype=torch.bool)
        last[:-1] = seg[1:] != seg[:-1]
        lost = last & (t != fill)
        if bool(lost.any()):
            pos = int(torch.nonzero(lost)[0])
            raise ValueError(
                f"pack {index}: Megatron-shifted label {int(t[pos])} at token {pos} is the target of the last token "
                "of its sequence (the token after it); HF labels have no slot for it and converting would lose it. "
                "Collate with labels='shifted' (Megatron consumers), or assemble with alignment > 1 (the padding "
                "slot carries it)"
            )
    fn = shift_labels if shifted else unshift_labels
    return fn(t.long(), p.seq_idx.long(), ignore_index=fill).to(t.dtype)


def _row(p: PackedSequence, specs, mrope: bool, pad_values, shifted: bool, index: int = 0) -> dict[str, torch.Tensor]:
    labels = p.labels
    mask = p.columns.get("loss_mask")
    if mask is not None:  # a packed loss_mask (flatten_padded_batch) removes targets in every convention
        if mask.shape != labels.shape:
            raise ValueError(
                f"pack {index}: loss_mask has shape {tuple(mask.shape)} but labels {tuple(labels.shape)}; "
                "give one 0/1 value per token"
            )
        labels = labels.masked_fill(mask == 0, IGNORE_INDEX)
    row = {
        "input_ids": p.input_ids if p.input_ids is not None else torch.zeros(p.total_tokens, dtype=torch.int64),
        "labels": _convert(p, labels, shifted, IGNORE_INDEX, index),
        "position_ids": p.position_ids.expand(3, -1) if mrope and p.position_ids.dim() == 1 else p.position_ids,
        "padding_mask": p.padding_mask,
    }
    for name, (shape, dtype) in specs.items():
        col = p.columns.get(name)
        if col is None:
            col = torch.full((p.total_tokens, *shape), pad_values.get(name, 0), dtype=dtype, device=p.labels.device)
        elif name == "loss_mask":  # follows the label convention: 1 exactly where a target remains
            col = (row["labels"] != IGNORE_INDEX).to(col.dtype)
        row[name] = col.to(dtype)
    return row


def _pad_row(row: dict[str, torch.Tensor], extra: int, pad_id: dict, pos_start: int, mrope: bool) -> dict:
    if not extra:
        return row
    out = {}
    for name, t in row.items():
        if name == "position_ids":
            tail = _tail_positions(pos_start, extra, mrope).to(t.device)
            out[name] = torch.cat([t, tail], dim=-1)
        else:
            fill = torch.full((extra, *t.shape[1:]), pad_id.get(name, 0), dtype=t.dtype, device=t.device)
            out[name] = torch.cat([t, fill])
    return out


def _thd(packs, rows, mrope, multiple, pad_id) -> dict:
    total = sum(p.total_tokens for p in packs)
    extra = -total % multiple
    segs = [p.segments() for p in packs]
    real = np.concatenate([r for r, _ in segs] + ([np.zeros(1, dtype=np.int64)] if extra else []))
    phys = np.concatenate([ph for _, ph in segs] + ([np.full(1, extra, dtype=np.int64)] if extra else []))
    batch: dict[str, Any] = {}
    for name in rows[0]:
        parts = [r[name] for r in rows]
        cat = torch.cat(parts, dim=-1 if name == "position_ids" else 0) if len(parts) > 1 else parts[0]
        if extra:
            cat = _pad_row({name: cat}, extra, pad_id, 0, mrope)[name]
        batch[name] = cat.unsqueeze(-2) if name == "position_ids" and mrope else cat.unsqueeze(0)
    device = batch["labels"].device
    seq_idx = np.repeat(np.arange(phys.shape[0], dtype=np.int32), phys)
    cu = np.zeros(real.shape[0] + 1, dtype=np.int32)
    np.cumsum(real, out=cu[1:])
    cu_padded = np.zeros(phys.shape[0] + 1, dtype=np.int32)
    np.cumsum(phys, out=cu_padded[1:])
    pack_tokens = np.zeros(len(packs) + 1, dtype=np.int32)
    np.cumsum([p.total_tokens for p in packs], out=pack_tokens[1:])
    cu_t = torch.from_numpy(cu_padded).to(device)
    batch.update(
        seq_idx=torch.from_numpy(seq_idx).to(device).unsqueeze(0),
        cu_seqlens=torch.from_numpy(cu).to(device),
        cu_seqlens_padded=cu_t,
        cu_seq_lens_q=cu_t,
        cu_seq_lens_k=cu_t,
        max_length_q=int(phys.max()),
        max_length_k=int(phys.max()),
        max_seqlen=max(p.max_seqlen for p in packs),
        max_seqlen_padded=max(int(ph[: p.num_sequences].max()) for p, (_, ph) in zip(packs, segs)),
        num_sequences=torch.tensor([p.num_sequences for p in packs], dtype=torch.int32),
        cu_pack_tokens=torch.from_numpy(pack_tokens),
        total_tokens=total + extra,
        layout="thd",
    )
    return batch


def _padded(packs, rows, mrope, multiple, pad_id) -> dict:
    width = max(p.total_tokens for p in packs)
    width += -width % multiple
    padded_rows, seq_rows, reals, physs = [], [], [], []
    for p, row in zip(packs, rows):
        extra = width - p.total_tokens
        last = int(p.position_ids[..., -1].max()) + 1 if p.tail else 0  # extend a tail, else a new segment
        padded_rows.append(_pad_row(row, extra, pad_id, last, mrope))
        r, ph = _segments(p)
        sidx = p.seq_idx.to(torch.int32)
        if extra:
            if p.tail:
                ph[-1] += extra
                sidx = torch.cat([sidx, torch.full((extra,), len(ph) - 1, dtype=torch.int32)])
            else:
                r.append(0)
                ph.append(extra)
                sidx = torch.cat([sidx, torch.full((extra,), len(ph) - 1, dtype=torch.int32)])
        seq_rows.append(sidx)
        reals.append(r)
        physs.append(ph)
    batch: dict[str, Any] = {}
    for name in padded_rows[0]:
        batch[name] = torch.stack([r[name] for r in padded_rows], dim=-2 if name == "position_ids" and mrope else 0)
    batch["seq_idx"] = torch.stack(seq_rows)
    m = max(len(r) for r in reals)
    cu = torch.zeros(len(packs), m + 1, dtype=torch.int32)
    cu_padded = torch.zeros(len(packs), m + 1, dtype=torch.int32)
    for i, (r, ph) in enumerate(zip(reals, physs)):
        cu[i, 1 : len(r) + 1] = torch.cumsum(torch.tensor(r), 0)
        cu[i, len(r) + 1 :] = cu[i, len(r)]
        cu_padded[i, 1 : len(ph) + 1] = torch.cumsum(torch.tensor(ph), 0)
        cu_padded[i, len(ph) + 1 :] = cu_padded[i, len(ph)]
    flat = [0]
    for i, ph in enumerate(physs):
        flat += (i * width + torch.cumsum(torch.tensor(ph), 0)).tolist()
    flat_cu = torch.tensor(flat, dtype=torch.int32)
    device = batch["labels"].device
    batch.update(
        cu_seqlens=cu.to(device),
        cu_seqlens_padded=cu_padded.to(device),
        cu_seq_lens_q=flat_cu.to(device),
        cu_seq_lens_k=flat_cu.to(device),
        max_length_q=max(max(ph) for ph in physs),
        max_length_k=max(max(ph) for ph in physs),
        max_seqlen=max(p.max_seqlen for p in packs),
        max_seqlen_padded=max(p.max_seqlen_padded for p in packs),
        num_sequences=torch.tensor([p.num_sequences for p in packs], dtype=torch.int32),
        cu_pack_tokens=torch.arange(len(packs) + 1, dtype=torch.int32) * width,
        total_tokens=width * len(packs),
        layout="padded",
    )
    return batch
