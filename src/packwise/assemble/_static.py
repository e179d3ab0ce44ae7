"""``max_segments``: boundary tensors of one fixed size in every batch (``torch.compile``, CUDA graphs).

A batch's ``cu_seqlens`` has one entry per segment plus one, so it changes size with the number of documents
and a compiled model sees a new shape — a recompile — whenever that number changes. With ``max_segments`` every
boundary tensor gets exactly ``max_segments + 1`` entries per row: the missing segments are empty ones,
written as the last boundary repeated (Megatron-Bridge's ``pad_cu_seqlens`` does the same for CUDA graphs;
varlen kernels give an empty segment no tokens). A batch with more segments than that is refused by name.

Segments are what ``cu_seqlens`` lists: every document, plus each padding segment (a pack's tail padding to
``pack_width`` / ``pad_to``, the batch's padding to ``pad_to_multiple_of``). thd: over the whole batch;
padded: per row (``[P, max_segments + 1]``; the flattened ``cu_seq_lens_q/k``: ``P·max_segments + 1``).
"""

from __future__ import annotations

import torch

#: the per-segment boundary keys of a batch (``cu_seq_lens_q/k``: flattened over rows in the padded layout).
BOUNDARY_KEYS = ("cu_seqlens", "cu_seqlens_padded")
FLAT_KEYS = ("cu_seq_lens_q", "cu_seq_lens_k")


def check_max_segments(max_segments) -> int | None:
    """``max_segments`` as an int >= 1, or None (no padding of the boundaries).

    Raises:
        ValueError: not an integer (bools refused) or < 1.

    Example:
        >>> check_max_segments(8), check_max_segments(None)
        (8, None)
    """
    if max_segments is None:
        return None
    if isinstance(max_segments, bool) or not isinstance(max_segments, int) or max_segments < 1:
        raise ValueError(
            f"max_segments must be an integer >= 1 (segments per batch row: documents plus padding segments) "
            f"or None, got {max_segments!r}"
        )
    return max_segments


def _repeat_last(cu: torch.Tensor, size: int) -> torch.Tensor:
    extra = size - cu.shape[-1]
    if not extra:
        return cu
    return torch.cat([cu, cu[..., -1:].expand(*cu.shape[:-1], extra)], dim=-1)


def pad_segments(batch: dict, max_segments: int | None) -> dict:
    """Give ``batch``'s boundary tensors exactly ``max_segments + 1`` entries per row (in place; returned).

    Args:
        batch: a :func:`~packwise.assemble.collate_packs` batch (``layout`` "thd" or "padded").
        max_segments: segments per row (see the module docstring); None leaves the batch as it is.

    Raises:
        ValueError: a row with more segments than ``max_segments`` (names the row, the count and the fix).

    Example:
        >>> from packwise.assemble import assemble_pack, collate_packs
        >>> b = collate_packs([assemble_pack([{"input_ids": [1, 2, 3]}, {"input_ids": [4]}])])
        >>> pad_segments(b, 4)["cu_seqlens"].tolist()
        [0, 3, 4, 4, 4]
    """
    m = check_max_segments(max_segments)
    if m is None:
        return batch
    cu = batch["cu_seqlens"]
    if cu.dim() == 1:
        rows = [cu.shape[0] - 1]
    else:  # padded rows repeat their last boundary already; physical segments are never empty: count the steps
        rows = [int(r.shape[0]) - 1 for r in (torch.unique_consecutive(x) for x in batch["cu_seqlens_padded"])]
    worst = max(range(len(rows)), key=rows.__getitem__)
    if rows[worst] > m:
        where = "the batch" if cu.dim() == 1 else f"row {worst} of the batch"
        raise ValueError(
            f"{where} has {rows[worst]} segments (documents plus padding segments) > max_segments={m}; plan with "
            f"max_segments={m} (PackingConfig.max_segments: at most {m} documents per pack, one fewer with "
            "fixed_width), collate fewer packs per batch, or raise max_segments"
        )
    for key in BOUNDARY_KEYS:
        batch[key] = _repeat_last(batch[key], m + 1)
    flat_size = m * (1 if cu.dim() == 1 else cu.shape[0]) + 1
    for key in FLAT_KEYS:
        if key in batch:
            batch[key] = _repeat_last(batch[key], flat_size)
    return batch
