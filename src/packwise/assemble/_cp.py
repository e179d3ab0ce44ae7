"""Context parallelism: the zigzag split of every physical segment, and its exact inverse.

Source: Megatron-LM / Transformer Engine THD context parallelism (``thd_get_partitioned_indices``),
NeMo-RL ``_get_tokens_on_this_cp_rank``: each padded sequence is cut into ``2·cp`` equal chunks and rank
``r`` keeps chunks ``r`` and ``2·cp-1-r``, which balances causal-attention work across ranks. A length
that is not divisible by ``2·cp`` is an error here — Transformer Engine silently rounds it down
(TE #1929/#1930).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any, cast, overload

import torch

from ._batch import NON_TOKEN_KEYS, PackedBatch
from ._labels import shift_labels, unshift_labels


def as_int(value) -> int | None:
    """A Python int from an int, numpy integer or one-element integer tensor (``operator.index``), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point():
        value = value.item()
    try:
        return operator.index(value)
    except TypeError:
        return None


@overload
def _check(cp_size, cp_rank: None = None) -> tuple[int, None]: ...
@overload
def _check(cp_size, cp_rank: int) -> tuple[int, int]: ...
def _check(cp_size, cp_rank=None) -> tuple[int, int | None]:
    size = as_int(cp_size)
    if size is None or size < 1:
        raise ValueError(f"cp_size must be an integer >= 1, got {cp_size!r}")
    rank = None if cp_rank is None else as_int(cp_rank)
    if cp_rank is not None and (rank is None or not 0 <= rank < size):
        raise ValueError(f"cp_rank must be an integer in [0, {size}), got {cp_rank!r}")
    return size, rank


def cp_indices(cu_seqlens_padded: torch.Tensor, cp_size: int, cp_rank: int) -> torch.Tensor:
    """``(T / cp_size,)`` int64 token indices rank ``cp_rank`` keeps, segment by segment.

    Raises:
        ValueError: a physical segment's length is not divisible by ``2 * cp_size``.

    Example:
        >>> cp_indices(torch.tensor([0, 8]), 2, 0).tolist(), cp_indices(torch.tensor([0, 8]), 2, 1).tolist()
        ([0, 1, 6, 7], [2, 3, 4, 5])
    """
    cp_size, cp_rank = _check(cp_size, cp_rank)
    cu = torch.as_tensor(cu_seqlens_padded).to(torch.int64).cpu()
    if cu.dim() != 1 or cu.shape[0] < 2 or int(cu[0]) != 0 or bool((cu.diff() < 0).any()):
        raise ValueError(f"cu_seqlens_padded must be (M+1,) non-decreasing from 0, got {cu.tolist()}")
    lengths = cu.diff()
    if cp_size == 1:
        return torch.arange(int(cu[-1]), dtype=torch.int64)
    bad = torch.nonzero(lengths % (2 * cp_size)).flatten()
    if bad.numel():
        i = int(bad[0])
        raise ValueError(
            f"segment {i} (tokens {int(cu[i])}..{int(cu[i + 1])}) has {int(lengths[i])} tokens, not divisible by "
            f"2*cp_size={2 * cp_size}; align every sequence and the pack length with "
            f"packwise.plan.alignment_multiple(cp={cp_size}) (assemble_pack(alignment=..., pad_to=...) or "
            "PackingConfig(topology={'cp': ...}).assemble; a flatten_padded_batch pack is tight: pad each row's "
            "length to that multiple before flattening)"
        )
    chunk = lengths // (2 * cp_size)
    starts = cu[:-1]
    first = starts + cp_rank * chunk
    second = starts + (2 * cp_size - 1 - cp_rank) * chunk
    seg_starts = torch.stack([first, second], dim=1).flatten()
    seg_len = chunk.repeat_interleave(2)
    offsets = torch.cumsum(seg_len, 0) - seg_len
    return torch.arange(int(seg_len.sum())) - torch.repeat_interleave(offsets - seg_starts, seg_len)


def _token_axis(name: str, t: torch.Tensor) -> int:
    return t.dim() - 1 if name == "position_ids" else 1


def shard_for_context_parallel(batch: PackedBatch, *, cp_size: int, cp_rank: int) -> PackedBatch:
    """This rank's share of a ``layout="thd"`` batch: every per-token tensor is zigzag-split.

    Boundary tensors (``cu_seqlens*``, ``max_*``) stay global, as Transformer Engine expects; ``cp_size``
    and ``cp_rank`` are added.

    Labels are shifted *before* the split: after it, token ``t+1`` of a document is often on another rank,
    so an unshifted (HF) loss on a shard would score logits against the wrong targets. An HF batch
    (``labels_shifted=False``) with ``cp_size > 1`` therefore comes back with ``labels`` shifted within each
    document (``labels_shifted=True``) and the same tensor as ``shift_labels`` (the key HF Transformers'
    causal-LM loss reads instead of shifting). Score it with ``packed_cross_entropy(...,
    labels_shifted=True)`` or ``PackingConfig.loss()``; the sum of the ranks' losses equals the unsharded
    loss. The shift is lossless because the label of every segment's first token is -100 in an HF batch
    (``collate_packs`` masks it; an HF loss would score it against the previous segment's last token), so
    :func:`unshard_context_parallel` gives the HF labels back exactly.

    Raises:
        ValueError: not a thd batch, bad ``cp_size``/``cp_rank``, a segment length not divisible by
            ``2 * cp_size``, a per-token tensor whose length is not the batch's token count, or (HF labels,
            ``cp_size > 1``) a segment whose first label is not -100 or whose first ``loss_mask`` is not 0.

    Example:
        >>> from packwise.assemble import assemble_pack, collate_packs
        >>> batch = collate_packs([assemble_pack([{"input_ids": list(range(8))}])])
        >>> shard_for_context_parallel(batch, cp_size=2, cp_rank=1)["input_ids"].tolist()
        [[2, 3, 4, 5]]
    """
    if not isinstance(batch, dict) or batch.get("layout") != "thd" or "cu_seqlens_padded" not in batch:
        raise ValueError("shard_for_context_parallel needs a layout='thd' batch from collate_packs")
    cp_size, cp_rank = _check(cp_size, cp_rank)
    idx = cp_indices(batch["cu_seqlens_padded"], cp_size, cp_rank)
    total = int(batch["cu_seqlens_padded"][-1])
    rows = cast(
        "dict[str, Any]", batch
    )  # PackedBatch: its fixed keys plus the rows' own columns (TypedDict cannot declare extra keys)
    if cp_size > 1 and not rows.get("labels_shifted", False) and isinstance(rows.get("labels"), torch.Tensor):
        rows = _shifted(rows, total)
    out = dict(rows)
    for name, t in rows.items():
        if name in NON_TOKEN_KEYS or not isinstance(t, torch.Tensor):
            continue
        axis = _token_axis(name, t)
        if t.dim() <= axis or t.shape[axis] != total:
            raise ValueError(f"batch[{name!r}] has shape {tuple(t.shape)}; expected {total} tokens on axis {axis}")
        out[name] = t.index_select(axis, idx.to(t.device))
    out["cp_size"], out["cp_rank"] = cp_size, cp_rank
    return cast("PackedBatch", out)


def _shifted(batch: dict, total: int) -> dict:
    """An HF batch with its labels (and a packed ``loss_mask``) shifted within every physical segment."""
    cu = torch.as_tensor(batch["cu_seqlens_padded"]).to(torch.int64).cpu()
    labels = batch["labels"]
    if labels.shape[-1] != total:
        raise ValueError(f"batch['labels'] has shape {tuple(labels.shape)}; expected {total} tokens on axis 1")
    seg = _segments(cu).to(labels.device).expand_as(labels)
    starts = cu[:-1][cu.diff() > 0].to(labels.device)
    heads = labels[..., starts]
    if bool((heads != -100).any()):
        k = int(torch.nonzero((heads != -100).reshape(-1, starts.numel()).any(0))[0])
        raise ValueError(
            f"labels[{int(starts[k])}] (the first token of segment {k}) is {int(heads[..., k].flatten()[0])}, "
            "not -100: "
            "shifting HF labels before the context-parallel split would lose it (an HF loss scores it against the "
            "previous segment's last token); set it to -100, as collate_packs does"
        )
    out = dict(batch, labels=shift_labels(labels, seg), labels_shifted=True)
    if isinstance(batch.get("loss_mask"), torch.Tensor):
        mask = batch["loss_mask"]
        if bool((mask[..., starts] != 0).any()):
            raise ValueError(
                "loss_mask is not 0 at the first token of every segment: shifting it before the context-parallel "
                "split would lose that value; set it to 0 there (that token has no HF target)"
            )
        out["loss_mask"] = shift_labels(mask.long(), seg, ignore_index=0).to(mask.dtype)
    out["shift_labels"] = out["labels"]
    return out


def _segments(cu: torch.Tensor) -> torch.Tensor:
    """``(T,)`` int64 physical segment of every token from ``cu_seqlens_padded``."""
    return torch.repeat_interleave(torch.arange(cu.shape[0] - 1), cu.diff())


def unshard_context_parallel(shards: Sequence[PackedBatch]) -> PackedBatch:
    """Inverse of :func:`shard_for_context_parallel`: the shards of ranks ``0 .. cp-1`` -> the full batch.

    Exact: HF labels that the split shifted (the shards carry ``shift_labels``) come back unshifted, with
    their ``loss_mask``, ``labels_shifted=False`` and no ``shift_labels``.

    Raises:
        ValueError: shards missing, out of rank order, or from different batches.

    Example:
        >>> from packwise.assemble import assemble_pack, collate_packs
        >>> batch = collate_packs([assemble_pack([{"input_ids": [1, 2, 3, 4]}])])
        >>> shards = [shard_for_context_parallel(batch, cp_size=2, cp_rank=r) for r in range(2)]
        >>> shards[0]["labels"].tolist(), unshard_context_parallel(shards)["labels"].tolist()
        ([[2, -100]], [[-100, 2, 3, 4]])
    """
    if not shards:
        raise ValueError("unshard_context_parallel needs the shards of every rank")
    cp_size = shards[0].get("cp_size")
    ranks = [s.get("cp_rank") for s in shards]
    if not isinstance(cp_size, int) or cp_size != len(shards) or ranks != list(range(len(shards))):
        want = cp_size if isinstance(cp_size, int) and cp_size >= 1 else len(shards)
        raise ValueError(
            f"got {len(shards)} shards of ranks {ranks} (cp_size={cp_size!r}); need the {want} shards of ranks "
            f"0..{want - 1} in rank order"
        )
    cu = shards[0]["cu_seqlens_padded"]
    if any(not torch.equal(s["cu_seqlens_padded"], cu) for s in shards):
        raise ValueError("shards come from different batches (cu_seqlens_padded differ)")
    total = int(cu[-1])
    indices = [cp_indices(cu, cp_size, r) for r in range(cp_size)]
    parts = [
        cast("dict[str, Any]", s) for s in shards
    ]  # PackedBatch: its fixed keys plus the rows' own columns (TypedDict cannot declare extra keys)
    out = {k: v for k, v in parts[0].items() if k not in ("cp_size", "cp_rank")}
    for name, t in parts[0].items():
        if name in NON_TOKEN_KEYS or not isinstance(t, torch.Tensor):
            continue
        axis = _token_axis(name, t)
        shape = list(t.shape)
        shape[axis] = total
        full = torch.empty(shape, dtype=t.dtype, device=t.device)
        for s, idx in zip(parts, indices):
            full.index_copy_(axis, idx.to(t.device), s[name])
        out[name] = full
    if "shift_labels" in out and out.get("labels_shifted") is True and cp_size > 1:  # shifted by the split: undo
        seg = _segments(torch.as_tensor(cu).to(torch.int64).cpu())
        labels = out.pop("shift_labels")
        out["labels"] = unshift_labels(labels, seg.to(labels.device).expand_as(labels))
        if isinstance(out.get("loss_mask"), torch.Tensor):
            mask = out["loss_mask"]
            back = unshift_labels(mask.long(), seg.to(mask.device).expand_as(mask), ignore_index=0)
            out["loss_mask"] = back.to(mask.dtype)
        out["labels_shifted"] = False
    return cast("PackedBatch", out)
