"""``flatten_padded_batch``: an already collated, right-padded ``[B, S]`` batch -> one tight THD pack.

This is Megatron-Bridge's ``pack_language_shard`` case (a whole data-parallel shard becomes one pack,
no length budget; ``megatron_mimo/sequence_pack.py``). The real lengths come from the caller — never
inferred from ``loss_mask`` or pad values, which would merge or split documents whenever a pad id appears
inside a sample. Bridge's contract, met exactly: labels as given (pad -100), ``loss_mask`` packed (pad 0),
position ids ``[B, S]`` or MRoPE ``[3, B, S]``, no tokens on label-only pipeline stages.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch

from ..plan import mask_boundaries
from ._labels import Labels, check_labels
from ._pack import PackedSequence, assemble_pack


def flatten_padded_batch(batch: Mapping[str, torch.Tensor], *, lengths, labels: Labels = "shifted") -> PackedSequence:
    """Concatenate each row's real prefix into one pack; positions, labels and ``loss_mask`` are kept as given.

    Args:
        batch: right-padded tensors: ``input_ids`` ``[B, S]`` (may be absent on pipeline stages that only
            carry labels), ``labels``, ``loss_mask``, ``position_ids`` ``[B, S]`` or MRoPE ``[3, B, S]``, an
            optional ``attention_mask`` ``[B, S]`` (used only to verify right-padding), and other per-token
            columns ``[B, S, ...]``.
        lengths: ``(B,)`` real tokens per row (list or tensor).
        labels: the convention of ``batch["labels"]``. ``"shifted"`` (Megatron, the default: Bridge's
            contract) keeps every label exactly as given — ``labels[t]`` is position ``t``'s own target, so
            no target crosses a row. ``"hf"`` (unshifted) sets the first label of every row to -100: an HF
            loss shifts over the whole pack and would score the previous row's last token against it.

    Returns:
        A :class:`PackedSequence` of ``ΣB lengths`` tokens (``labels_shifted`` records the convention);
        ``columns["loss_mask"]`` holds the packed ``loss_mask`` (its dtype) when the batch has one;
        ``input_ids`` is None when the batch has none (label-only pipeline stages); a batch with neither
        ``input_ids`` nor ``labels`` (a middle pipeline stage: only ``position_ids`` or only ``loss_mask``, as
        Megatron-Bridge's ``pack_language_shard`` packs it) gets ``labels`` of -100 (no target on that stage).

    Raises:
        ValueError: no tensor to take a device from, shapes that disagree, lengths out of ``[0, S]``, a
            total of zero tokens, or an ``attention_mask`` that is not right-padded to ``lengths``.

    Example:
        >>> import torch
        >>> b = {"input_ids": torch.tensor([[1, 2, 0], [3, 4, 5]]), "labels": torch.tensor([[1, 2, -100], [3, 4, 5]])}
        >>> p = flatten_padded_batch(b, lengths=[2, 3])
        >>> p.input_ids.tolist(), p.labels.tolist(), p.position_ids.tolist()
        ([1, 2, 3, 4, 5], [1, 2, 3, 4, 5], [0, 1, 0, 1, 2])
        >>> flatten_padded_batch(b, lengths=[2, 3], labels="hf").labels.tolist()
        [-100, 2, -100, 4, 5]
        >>> mid = flatten_padded_batch({"position_ids": torch.tensor([[0, 1, 0], [0, 1, 2]])}, lengths=[2, 3])
        >>> mid.position_ids.tolist(), mid.cu_seqlens.tolist(), mid.input_ids is None
        ([0, 1, 0, 1, 2], [0, 2, 5], True)
    """
    shifted = check_labels(labels) == "shifted"
    tensors = {k: v for k, v in batch.items() if isinstance(v, torch.Tensor)}
    if not tensors:
        raise ValueError("flatten_padded_batch: no tensor in the batch to take a device and shape from")
    lengths = torch.as_tensor(lengths).flatten().cpu()
    if lengths.is_floating_point() or lengths.dtype == torch.bool:
        raise TypeError(f"lengths must be integers (tokens per row), got dtype {lengths.dtype}")
    lengths = lengths.to(torch.int64)
    ref_name = (
        next(k for k in ("input_ids", "labels", "loss_mask") if k in tensors)
        if any(k in tensors for k in ("input_ids", "labels", "loss_mask"))
        else next(iter(tensors))
    )
    ref = tensors[ref_name]
    if ref.dim() < 2:
        raise ValueError(f"batch[{ref_name!r}] has shape {tuple(ref.shape)}; expected [B, S]")
    mrope = ref_name == "position_ids" and ref.dim() == 3  # MRoPE [3, B, S]: rows and width on axes 1 and 2
    if mrope and ref.shape[0] != 3:
        raise ValueError(f"batch['position_ids'] has shape {tuple(ref.shape)}; expected [B, S] or MRoPE [3, B, S]")
    b, s = (int(ref.shape[1]), int(ref.shape[2])) if mrope else (int(ref.shape[0]), int(ref.shape[1]))
    if lengths.shape[0] != b:
        raise ValueError(f"lengths has {lengths.shape[0]} entries for a batch of {b} rows")
    if bool((lengths < 0).any()) or bool((lengths > s).any()):
        raise ValueError(f"lengths must be in [0, {s}] (the row width), got {lengths.tolist()}")
    if int(lengths.sum()) == 0:
        raise ValueError("flatten_padded_batch: total length is 0 tokens; nothing to pack")
    for name in ("input_ids", "labels", "loss_mask", "attention_mask"):
        if name in tensors and tensors[name].dim() != 2:
            raise ValueError(f"batch[{name!r}] has shape {tuple(tensors[name].shape)}; expected [B, S]")
    for name, t in tensors.items():
        if name == "position_ids" and t.dim() == 3:
            ok = t.shape[0] == 3 and tuple(t.shape[1:]) == (b, s)
        else:
            ok = tuple(t.shape[:2]) == (b, s)
        if not ok:
            raise ValueError(f"batch[{name!r}] has shape {tuple(t.shape)}; expected [{b}, {s}, ...] like {ref_name!r}")
    mask = tensors.get("attention_mask")
    if mask is not None:
        expect = torch.arange(s) < lengths[:, None]
        if not torch.equal(mask.bool().cpu(), expect):
            row = int(torch.nonzero((mask.bool().cpu() != expect).any(dim=1))[0])
            raise ValueError(
                f"row {row} is not right-padded to its length {int(lengths[row])} (attention_mask disagrees)"
            )
    sequences = []
    rows = [row for row in range(b) if int(lengths[row])]
    for row in rows:
        n = int(lengths[row])
        seq = {}
        for name, t in tensors.items():
            if name in ("attention_mask", "loss_mask") or (name == "labels" and "input_ids" in tensors):
                continue  # labels are placed below exactly as declared by ``labels=`` (not guessed per row)
            seq[name] = t[:, row, :n] if name == "position_ids" and t.dim() == 3 else t[row, :n]
        if "input_ids" not in tensors and "labels" not in tensors:  # a middle pipeline stage: no targets here
            seq["labels"] = torch.full((n,), -100, dtype=torch.int64, device=ref.device)
        sequences.append(seq)
    pack = assemble_pack(sequences, labels_shifted=shifted)
    changes: dict[str, Any] = {}  # PackedSequence fields to replace
    if "labels" in tensors:  # shifted: exactly as given; hf: the first label of every row carries no target
        given = torch.cat([tensors["labels"][row, : int(lengths[row])] for row in rows]).long()
        if not shifted:
            mask_boundaries(given, pack.cu_seqlens[:-1].numpy(force=True))
        changes["labels"] = given
    if "loss_mask" in tensors:
        mask = torch.cat([tensors["loss_mask"][row, : int(lengths[row])] for row in rows])
        changes["columns"] = {**pack.columns, "loss_mask": mask}
    return dataclasses.replace(pack, **changes) if changes else pack
