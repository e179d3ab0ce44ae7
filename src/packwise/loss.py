"""Packing-invariant cross-entropy.

With packing, the number of documents and target tokens per micro-batch varies. A loss averaged per
micro-batch would weight tokens differently depending on how documents were grouped, so the gradient
would depend on the plan. ``token_mean`` divides by a *global* count of target tokens (``num_items``,
summed over micro-batches and data-parallel ranks — HF's ``num_items_in_batch``, NeMo-RL's global valid
tokens), which makes the summed gradient identical to unpacked training. ``sequence_mean`` averages per
document first, equal to the per-sample mean of unpacked training.
"""

from __future__ import annotations

import operator
import warnings
from typing import Literal

import torch
import torch.nn.functional as F

from .constants import IGNORE_INDEX

Reduction = Literal["token_mean", "sequence_mean", "sum"]


def packed_cross_entropy(
    logits: torch.Tensor,
    labels: torch.Tensor,
    *,
    reduction: Reduction = "token_mean",
    cu_seqlens_padded: torch.Tensor | None = None,
    num_items: int | torch.Tensor | None = None,
    labels_shifted: bool = False,
    ignore_index: int = IGNORE_INDEX,
    cu_seqlens: torch.Tensor | None = None,
) -> torch.Tensor:
    """Cross-entropy over packed rows (logits upcast to float32).

    Args:
        logits: ``(B, T, V)`` or ``(T, V)``.
        labels: ``(B, T)`` or ``(T,)``: HF convention (unshifted, ``-100`` = no loss; this function shifts,
            so ``logits[t]`` is scored against ``labels[t+1]``), or already aligned with
            ``labels_shifted=True`` (Megatron: ``labels[t]`` is the target of ``logits[t]``).
        reduction: ``token_mean`` — sum over target tokens / ``num_items`` (default: the local count);
            ``sequence_mean`` — mean over each document's targets, then sum / ``num_items`` (default: the
            number of documents with a target); ``sum``.
        cu_seqlens_padded: ``(M+1,)`` *physical* segment boundaries over the flattened ``B·T`` tokens,
            padding included (required for ``sequence_mean``; the batch's ``cu_seq_lens_q``).
        num_items: global normaliser (tokens or documents, see ``reduction``).
        labels_shifted: see ``labels``.
        ignore_index: label value that carries no loss.
        cu_seqlens: the old name of ``cu_seqlens_padded`` (deprecated: in a batch ``cu_seqlens`` holds the *real*
            lengths, which are not positions in the row once there is padding).

    Returns:
        A scalar tensor (float32).

    Without any target (all labels -100) the loss is 0, not NaN.

    Raises:
        ValueError: shapes that disagree, an unknown reduction, ``sequence_mean`` without ``cu_seqlens_padded``, a
            label that is neither ``ignore_index`` nor a class, or ``num_items <= 0``.
        TypeError: labels of a float, complex or bool dtype (they would be truncated to a class).

    Example:
        >>> logits = torch.zeros(5, 3)          # uniform: every target costs log(3)
        >>> labels = torch.tensor([-100, 1, 2, -100, 0])   # two documents: [0, 3) and [3, 5)
        >>> round(float(packed_cross_entropy(logits, labels)), 4), round(float(torch.log(torch.tensor(3.0))), 4)
        (1.0986, 1.0986)
        >>> float(packed_cross_entropy(logits, labels, reduction="sum")) == 3 * float(torch.log(torch.tensor(3.0)))
        True
        >>> cu = torch.tensor([0, 3, 5])
        >>> round(float(packed_cross_entropy(logits, labels, reduction="sequence_mean", cu_seqlens_padded=cu)), 4)
        1.0986
    """
    if reduction not in ("token_mean", "sequence_mean", "sum"):
        raise ValueError(f"unknown reduction {reduction!r}; use token_mean, sequence_mean or sum")
    if cu_seqlens is not None:
        if cu_seqlens_padded is not None:
            raise ValueError("pass cu_seqlens_padded only (cu_seqlens is its deprecated name), not both")
        warnings.warn(
            "packed_cross_entropy(cu_seqlens=...) is deprecated: pass cu_seqlens_padded= (the physical boundaries, "
            "the batch's cu_seq_lens_q)",
            DeprecationWarning,
            stacklevel=2,
        )
        cu_seqlens_padded = cu_seqlens
    if labels.dtype.is_floating_point or labels.dtype.is_complex or labels.dtype == torch.bool:
        raise TypeError(
            f"labels has dtype {labels.dtype}; labels are token ids or {ignore_index} (integers) — a float label would "
            "be truncated to a class (2.7 -> 2). Pass integer labels (labels.long())"
        )
    if logits.dim() == 2:
        logits, labels = logits[None], labels[None]
    if logits.dim() != 3 or labels.shape != logits.shape[:2]:
        raise ValueError(
            f"logits {tuple(logits.shape)} must be (B, T, V) with labels (B, T), got {tuple(labels.shape)}"
        )
    b, t, v = logits.shape
    bad = (labels != ignore_index) & ((labels < 0) | (labels >= v))
    if bool(bad.any()):
        i = tuple(int(x) for x in torch.nonzero(bad)[0])
        raise ValueError(
            f"label {int(labels[i])} at {i} is neither {ignore_index} (no loss) nor a class in [0, {v}); "
            f"use {ignore_index} for positions without loss"
        )
    if num_items is not None and float(num_items) <= 0:
        raise ValueError(f"num_items must be > 0 (the global count of targets or documents), got {num_items}")
    positions = torch.arange(b * t, device=labels.device).view(b, t)
    if not labels_shifted:
        logits, labels, positions = logits[:, :-1], labels[:, 1:], positions[:, 1:]
    flat_labels = labels.reshape(-1)
    token_loss = F.cross_entropy(
        logits.reshape(-1, v).float(), flat_labels.long(), ignore_index=ignore_index, reduction="none"
    )
    if reduction == "sum":
        return token_loss.sum()
    valid = flat_labels != ignore_index
    if reduction == "token_mean":  # no target at all: a zero loss that still has a graph, not NaN
        denom = valid.sum().clamp(min=1) if num_items is None else num_items
        return token_loss.sum() / denom
    if cu_seqlens_padded is None:
        raise ValueError(
            "reduction='sequence_mean' needs cu_seqlens_padded (physical segment boundaries over the B*T tokens: "
            "the batch's cu_seq_lens_q)"
        )
    cu = torch.as_tensor(cu_seqlens_padded).to(device=labels.device, dtype=torch.int64)
    if cu.dim() != 1 or cu.shape[0] < 2 or int(cu[0]) != 0 or int(cu[-1]) != b * t or bool((cu.diff() < 0).any()):
        raise ValueError(f"cu_seqlens_padded must be (M+1,) non-decreasing from 0 to {b * t} tokens, got {cu.tolist()}")
    doc = torch.searchsorted(cu, positions.reshape(-1), right=True) - 1
    n_docs = cu.shape[0] - 1
    sums = torch.zeros(n_docs, device=token_loss.device).index_add_(0, doc, token_loss)
    counts = torch.zeros(n_docs, device=token_loss.device).index_add_(0, doc, valid.float())
    has = counts > 0
    per_doc = sums[has] / counts[has]
    denom = has.sum().clamp(min=1) if num_items is None else num_items
    return per_doc.sum() / denom


class PackedLoss:
    """:func:`packed_cross_entropy` that reads its labels and their convention from the batch.

    ``PackingConfig.loss()`` builds it, so the reduction and the label convention come from the config and
    the batch, never from a flag the caller must remember (a CP shard of an HF batch carries shifted labels).

    Args:
        reduction: ``token_mean`` | ``sequence_mean`` | ``sum`` (``PackingConfig.loss_reduction``).
        cp_size: context-parallel ranks (``PackingConfig.topology.cp``). With ``cp_size > 1`` a
            ``token_mean`` needs the global ``num_items`` (each rank holds part of every document) and
            ``sequence_mean`` is refused (a rank cannot know a document's mean). A batch that records its
            own ``cp_size`` (``shard_for_context_parallel``) must agree.
        labels: the label convention of batches without a ``labels_shifted`` key (``PackingConfig.labels``);
            a batch's ``labels_shifted`` (collate, CP shards of HF batches) is authoritative.

    Call ``loss(logits, batch, num_items=None)``: ``logits`` ``(1, T, V)`` / ``(P, S, V)`` for the batch's
    ``labels``; ``batch`` from ``collate_packs`` / ``PackCollator`` / ``shard_for_context_parallel`` (reads
    ``labels``, ``labels_shifted``, an optional ``loss_mask`` — 0 removes a target — and ``cu_seq_lens_q``).

    Raises:
        ValueError: an unknown reduction, or (at call) ``cp_size > 1`` without ``num_items`` /
            with ``sequence_mean``, and everything :func:`packed_cross_entropy` raises.

    Example:
        >>> from packwise.assemble import assemble_pack, collate_packs
        >>> batch = collate_packs([assemble_pack([{"input_ids": [1, 2, 0]}])], labels="shifted")
        >>> float(PackedLoss(reduction="sum")(torch.zeros(1, 3, 3), batch)) == 2 * float(torch.log(torch.tensor(3.0)))
        True
    """

    def __init__(self, *, reduction: Reduction = "token_mean", cp_size: int = 1, labels: str = "hf") -> None:
        if reduction not in ("token_mean", "sequence_mean", "sum"):
            raise ValueError(f"unknown reduction {reduction!r}; use token_mean, sequence_mean or sum")
        if labels not in ("hf", "shifted"):
            raise ValueError(f"labels={labels!r}; use 'hf' (unshifted, HF Transformers) or 'shifted' (Megatron)")
        try:  # an int or a numpy int; not a bool, float or string
            n = None if isinstance(cp_size, bool) else operator.index(cp_size)
        except TypeError:
            n = None
        if n is None or n < 1:
            raise ValueError(f"cp_size must be an integer >= 1 (context-parallel ranks), got {cp_size!r}")
        self.reduction, self.cp_size, self.labels = reduction, n, labels

    def __repr__(self) -> str:
        return f"PackedLoss(reduction={self.reduction!r}, cp_size={self.cp_size}, labels={self.labels!r})"

    def __call__(self, logits: torch.Tensor, batch, *, num_items: int | torch.Tensor | None = None) -> torch.Tensor:
        batch_cp = batch.get("cp_size")
        if batch_cp is not None and int(batch_cp) != self.cp_size:
            raise ValueError(
                f"the batch is a context-parallel shard of cp_size={int(batch_cp)} but the loss was built with "
                f"cp_size={self.cp_size}; build both from one PackingConfig (topology.cp={int(batch_cp)})"
            )
        if self.cp_size > 1 and self.reduction == "sequence_mean":
            raise ValueError(
                f"loss_reduction='sequence_mean' with topology.cp={self.cp_size}: each rank holds part of every "
                "document and cannot form its mean; use token_mean with the global num_items"
            )
        if self.cp_size > 1 and self.reduction == "token_mean" and num_items is None:
            raise ValueError(
                f"loss_reduction='token_mean' with topology.cp={self.cp_size} needs num_items: the global count "
                "of targets (all-reduced over CP and DP ranks); a rank's local count weights ranks unequally"
            )
        labels = batch["labels"]
        mask = batch.get("loss_mask")
        if isinstance(mask, torch.Tensor):
            if mask.numel() != labels.numel():
                raise ValueError(
                    f"batch['loss_mask'] has shape {tuple(mask.shape)} but labels {tuple(labels.shape)}; give one "
                    "0/1 value per label"
                )
            labels = labels.masked_fill(mask.reshape(labels.shape) == 0, IGNORE_INDEX)
        cu_padded = batch.get("cu_seq_lens_q") if self.reduction == "sequence_mean" else None
        return packed_cross_entropy(
            logits, labels, reduction=self.reduction, cu_seqlens_padded=cu_padded, num_items=num_items,
            labels_shifted=bool(batch.get("labels_shifted", self.labels == "shifted")),
        )  # fmt: skip


__all__ = ["PackedLoss", "packed_cross_entropy"]
