"""Label conventions: HF (unshifted) and Megatron (shifted), converted within each document, never across.

HF: ``labels[t]`` is the target of the logits at ``t-1`` (the loss shifts). Megatron (``labels="shifted"``):
``labels[t]`` is the target of the logits at ``t`` (Megatron-LM ``get_batch``: ``labels = tokens[1:]``).
In a pack the first HF label of every document and the last shifted label of every document carry no
target, so both directions are lossless: ``shifted[t] = hf[t+1]`` when ``t+1`` is in the same segment,
else -100.
"""

from __future__ import annotations

from typing import Literal

import torch

from ..constants import IGNORE_INDEX

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
