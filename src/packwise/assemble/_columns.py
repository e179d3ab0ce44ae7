"""Validation and concatenation of a pack's sequences: one pass over the sequences, cheap checks, then one
``torch.cat`` per column (what :func:`packwise.assemble.assemble_pack` builds on)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

#: Per-sample tensors that are not per token (images, videos): concatenated in sequence order, not padded.
MEDIA_KEYS = ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw", "second_per_grid_ts")
RESERVED = ("input_ids", "labels", "loss_mask", "position_ids", *MEDIA_KEYS)
#: Names the assembler and collator produce: a per-token column may not take them.
PRODUCED = (
    "cu_seqlens", "cu_seqlens_padded", "max_seqlen", "seq_idx", "padding_mask", "total_tokens", "cu_seq_lens_q",
    "cu_seq_lens_k", "max_length_q", "max_length_k", "num_sequences", "cu_pack_tokens", "layout", "metadata",
)  # fmt: skip


def as_tensor(value, name: str, index: int) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (np.ndarray, list, tuple)):
        try:
            return torch.as_tensor(np.asarray(value))
        except (TypeError, ValueError) as e:
            raise TypeError(f"sequence {index}: column {name!r} cannot become a tensor: {e}") from e
    raise TypeError(f"sequence {index}: column {name!r} is {type(value).__name__}, expected a tensor or array")


def _is_tensor_like(value) -> bool:
    return isinstance(value, (torch.Tensor, np.ndarray)) or (
        isinstance(value, (list, tuple)) and bool(value) and isinstance(value[0], (int, float, bool, list))
    )


@dataclass
class _Columns:
    lengths: list[int]
    ids: torch.Tensor | None
    labels: list[torch.Tensor | None]
    masks: list[torch.Tensor | None]
    positions: list[torch.Tensor | None]
    extra: dict[str, torch.Tensor]
    metadata: dict[str, list]
    device: torch.device
    media: dict[str, torch.Tensor] = field(default_factory=dict)


def _names(seq: Mapping) -> list[str]:
    names = sorted(k for k, v in seq.items() if k not in RESERVED and v is not None and _is_tensor_like(v))
    clash = [n for n in names if n in PRODUCED]
    if clash:
        raise ValueError(f"column {clash[0]!r} is a name packwise produces; rename the column")
    return names


_NOT_IDS = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.bool, torch.complex64,
                      torch.complex128})  # fmt: skip
_MEDIA = frozenset(MEDIA_KEYS)


def _collect(sequences: Sequence[Mapping]) -> _Columns:
    """Validate every sequence (one pass, cheap checks) and concatenate what can be concatenated.

    The loop is the hot path of ``assemble_pack`` (a few sequences per pack, thousands of packs per second):
    it reads each mapping once, and only sequences whose keys differ from sequence 0's pay for the
    per-key comparison."""
    for i, seq in enumerate(sequences):
        if not isinstance(seq, Mapping):
            raise TypeError(f"sequence {i} is a {type(seq).__name__}; pass a mapping with input_ids (and labels, ...)")
    first = sequences[0]
    names = _names(first)
    meta_keys = [k for k, v in first.items() if k not in RESERVED and v is not None and k not in names]
    first_keys = first.keys()
    media_keys = [k for k in MEDIA_KEYS if k in first_keys]
    lengths, ids_list, labels, masks, positions = [], [], [], [], []
    extra: dict[str, list] = {name: [] for name in names}
    metadata: dict[str, list] = {k: [] for k in meta_keys}
    media: dict[str, list] = {}
    device = None
    Tensor = torch.Tensor
    for i, seq in enumerate(sequences):
        keys = first_keys
        if i and seq.keys() != first_keys:
            keys = seq.keys()
            seq_names = _names(seq)
            if seq_names != names:
                diff = sorted(set(names) ^ set(seq_names))
                raise ValueError(
                    f"sequence {i}: per-token columns {seq_names} differ from sequence 0's {names} "
                    f"(column {diff[0]!r}); a pack's sequences must carry the same columns "
                    "(collate_packs fills columns across packs)"
                )
            for key in keys - first_keys:
                if key not in RESERVED and seq[key] is not None and key not in names:
                    metadata.setdefault(key, [None] * i)
        ids = seq.get("input_ids")
        if ids is not None:
            if type(ids) is not Tensor and not isinstance(ids, Tensor):
                ids = as_tensor(ids, "input_ids", i)
            if ids.dim() != 1:
                raise ValueError(f"sequence {i}: input_ids has shape {tuple(ids.shape)}; expected (L,) — one sequence")
            if ids.dtype in _NOT_IDS and ids.numel():
                raise TypeError(f"sequence {i}: input_ids has dtype {ids.dtype}; token ids are integers")
            ref = ids
        if i and (ids is not None) != bool(ids_list):
            raise ValueError(f"sequence {i}: input_ids present in some sequences but not others")
        lab = seq.get("labels")
        if lab is not None:
            if type(lab) is not Tensor and not isinstance(lab, Tensor):
                lab = as_tensor(lab, "labels", i)
            if lab.dim() != 1:
                lab = lab.reshape(-1)
        if ids is None:
            ref = lab
            if ref is None:
                raise ValueError(f"sequence {i}: needs input_ids (or labels when a stage carries no tokens)")
        length = ref.shape[0]
        if length == 0:
            raise ValueError(f"sequence {i} is empty (0 tokens); drop empty sequences before assembling")
        if device is None:
            device = ref.device
        if lab is not None and lab.shape[0] != length:
            raise ValueError(f"sequence {i}: column 'labels' has {lab.shape[0]} tokens but input_ids has {length}")
        mask = seq.get("loss_mask")  # with labels: a Megatron row (labels = text[1:]); see assemble._pack._labels
        if mask is not None:
            mask = (mask if isinstance(mask, Tensor) else as_tensor(mask, "loss_mask", i)).reshape(-1)
            if mask.shape[0] != length:
                raise ValueError(
                    f"sequence {i}: column 'loss_mask' has {mask.shape[0]} tokens but input_ids has {length}"
                )
            if ids is None and lab is None:
                raise ValueError(f"sequence {i}: loss_mask without input_ids; pass labels instead")
        pos = seq.get("position_ids")
        if pos is not None:
            pos = pos if isinstance(pos, Tensor) else as_tensor(pos, "position_ids", i)
            if pos.dim() == 2 and pos.shape[0] == 1:
                pos = pos[0]
            if pos.dim() not in (1, 2) or pos.shape[-1] != length or (pos.dim() == 2 and pos.shape[0] != 3):
                raise ValueError(
                    f"sequence {i}: position_ids has shape {tuple(pos.shape)}; "
                    f"expected ({length},) or MRoPE (3, {length})"
                )
        lengths.append(length)
        if ids is not None:
            ids_list.append(ids)
        labels.append(lab)
        masks.append(mask)
        positions.append(pos)
        for name in names:
            col = seq[name]
            if not isinstance(col, Tensor):
                col = as_tensor(col, name, i)
            if col.dim() == 0 or col.shape[0] != length:
                got = col.shape[0] if col.dim() else "a scalar"
                raise ValueError(f"sequence {i}: column {name!r} has {got} tokens but input_ids has {length}")
            extra[name].append(col)
        for key in media_keys if keys is first_keys else [k for k in MEDIA_KEYS if k in keys]:
            value = seq[key]
            if value is not None:
                value = value if isinstance(value, Tensor) else as_tensor(value, key, i)
                media.setdefault(key, []).append(value)
        for key, values in metadata.items():
            values.append(seq.get(key))
    joined = {}
    for name, chunks in extra.items():
        head = chunks[0]
        dtype, trailing = head.dtype, head.shape[1:]
        same = True
        for c in chunks:
            if c.dtype is not dtype or c.device != device:
                same = False
            if c.shape[1:] != trailing:
                shapes = sorted({tuple(x.shape[1:]) for x in chunks})
                raise ValueError(f"column {name!r}: per-token shapes differ across sequences: {shapes}")
        if not same:
            for c in chunks[1:]:
                dtype = torch.promote_types(dtype, c.dtype)
        joined[name] = torch.cat(chunks if same else [c.to(device=device, dtype=dtype) for c in chunks])
    ids_cat = None
    if ids_list:
        ids_cat = torch.cat(ids_list) if len(ids_list) > 1 else ids_list[0]
        if ids_cat.dtype != torch.int64 or ids_cat.device != device:
            ids_cat = ids_cat.to(device=device, dtype=torch.int64)
    media_cat = {k: torch.cat([t.to(device) for t in v]) for k, v in media.items()}
    return _Columns(lengths, ids_cat, labels, masks, positions, joined, metadata, device, media_cat)
