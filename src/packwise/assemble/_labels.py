"""Label conventions: HF (unshifted) and Megatron (shifted), converted within each document, never across.

HF: ``labels[t]`` is the target of the logits at ``t-1`` (the loss shifts). Megatron (``labels="shifted"``):
``labels[t]`` is the target of the logits at ``t`` (Megatron-LM ``get_batch``: ``labels = tokens[1:]``).
In a pack the first HF label of every document and the last shifted label of every document carry no
target, so both directions are lossless: ``shifted[t] = hf[t+1]`` when ``t+1`` is in the same segment,
else -100.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, cast

import numpy as np
import torch

from ..constants import IGNORE_INDEX
from ..plan import mask_boundaries  # the numpy seam every executor of a plan builds on

if TYPE_CHECKING:
    from ._columns import _Columns

Labels = Literal["hf", "shifted"]


def _same_segment_next(seq_idx: torch.Tensor) -> torch.Tensor:
    """``(..., T)`` bool: token ``t+1`` exists and is in the segment of token ``t``."""
    same = torch.zeros_like(seq_idx, dtype=torch.bool)
    same[..., :-1] = seq_idx[..., 1:] == seq_idx[..., :-1]
    return same


def shift_labels(labels: torch.Tensor, seq_idx: torch.Tensor, *, ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    """HF labels -> shifted labels, within each segment: ``out[t] = labels[t+1]`` if ``t+1`` shares ``t``'s segment.

    Args:
        labels: ``(..., T)`` int64 HF labels. seq_idx: ``(..., T)`` segment of each token (alignment padding
            belongs to its document, so the last real token's target is the padding's -100).

    Returns:
        ``(..., T)`` int64; the last token of every segment gets ``ignore_index``.

    Example:
        >>> shift_labels(torch.tensor([-100, 12, 13, -100, 22]), torch.tensor([0, 0, 0, 1, 1])).tolist()
        [12, 13, -100, 22, -100]
    """
    out = torch.full_like(labels, ignore_index)
    same = _same_segment_next(seq_idx)
    out[..., :-1] = torch.where(same[..., :-1], labels[..., 1:], ignore_index)
    return out


def unshift_labels(labels: torch.Tensor, seq_idx: torch.Tensor, *, ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    """Shifted labels -> HF labels, within each segment (the inverse of :func:`shift_labels`).

    Example:
        >>> unshift_labels(torch.tensor([12, 13, -100, 22, -100]), torch.tensor([0, 0, 0, 1, 1])).tolist()
        [-100, 12, 13, -100, 22]
    """
    out = torch.full_like(labels, ignore_index)
    same = _same_segment_next(seq_idx)
    out[..., 1:] = torch.where(same[..., :-1], labels[..., :-1], ignore_index)
    return out


def check_labels(labels) -> Labels:
    if labels not in ("hf", "shifted"):
        raise ValueError(f"labels={labels!r}; use 'hf' (unshifted, HF Transformers) or 'shifted' (Megatron)")
    return labels


def row_labels(cols: _Columns, starts: np.ndarray, lengths: np.ndarray, shifted: bool, pad: int) -> torch.Tensor:
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
    if cols.labels_flat is not None:  # flat input: HF labels of every row, one tensor
        hf = cols.labels_flat.to(device=cols.device, dtype=torch.int64, copy=True)
    elif all(lab is not None for lab in cols.labels) and not any(megatron):
        hf = torch.cat(cast("list[torch.Tensor]", cols.labels))  # every row's labels are set (checked above)
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
        given, given_mask = cast(torch.Tensor, cols.labels[i]), cast(torch.Tensor, cols.masks[i])  # megatron[i]
        lab = given.to(device=hf.device, dtype=torch.int64)
        lab = lab.masked_fill(~given_mask.to(device=hf.device, dtype=torch.bool), pad)
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
    if shifted:  # out[t] = hf[t+1] within each row; the last token of a row predicts nothing (or its own target)
        out = torch.empty_like(hf)
        if hf.device.type == "cpu":
            out.numpy()[:-1] = hf.numpy()[1:]
        else:
            out[:-1] = hf[1:]
        mask_boundaries(out, starts, lengths, shifted=True, ignore_index=pad)
        for pos, value in last_targets.items():
            out[pos] = value
        return out
    mask_boundaries(hf, starts, ignore_index=pad)  # no target crosses a sequence boundary
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
