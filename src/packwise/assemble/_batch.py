"""The batch packwise hands to a model: its keys, defined once.

``collate_packs``, ``assemble_batch``, ``PackCollator``, ``PackedDataCollator`` and
``shard_for_context_parallel`` return a dict with (a subset of) these keys plus any extra per-token column
of the input (``mm_token_type_ids``, ...). Every list of keys packwise needs elsewhere is derived from
:data:`BATCH_KEYS`: the names a per-token input column may not take (``PRODUCED``), the keys that are not
per-token tensors (``NON_TOKEN_KEYS``: context parallelism shards only the others), the per-sample media
(``MEDIA_KEYS``) and the keys an HF model takes (``HF_KEYS``).

Boundaries come in two kinds that are never confused: *real* (``cu_seqlens``: cumulative real lengths of
the documents, padding excluded) and *physical* (``cu_seqlens_padded`` and its HF spellings
``cu_seq_lens_q/k``: where each segment starts in the row, alignment and tail padding included).
"""

from __future__ import annotations

from typing import TypedDict

import torch

from ..constants import BATCH_KEYS, PRODUCED, Kind, keys_of  # noqa: F401  (re-exported; defined torch-free)

#: Per-sample tensors that are not per token (images, videos, audio clips): concatenated in sequence order, not
#: padded. Audio: ``input_features (clips, mel, frames)`` and ``feature_attention_mask (clips, frames)``.
MEDIA_KEYS = keys_of("media")
#: Batch keys that are not per-token tensors (context parallelism leaves them whole).
NON_TOKEN_KEYS = frozenset(keys_of("boundary", "scalar", "media", "metadata"))
#: The keys an HF model takes (``model(**batch)``): what :class:`packwise.hf.PackedDataCollator` returns,
#: plus ``mm_token_type_ids`` and media when the data has them.
HF_KEYS = tuple(k for k, (_, hf) in BATCH_KEYS.items() if hf)


class PackedBatch(TypedDict, total=False):
    """A batch of packs (``collate_packs``): ``P`` packs, ``T`` tokens in the row (thd: ``[1, T]``; padded:
    ``[P, S]``), ``M`` segments (documents plus one per tail padding). Extra per-token columns of the input
    (``mm_token_type_ids``, ...) appear under their own names with the shape of ``labels``.

    Example:
        >>> from packwise.assemble import assemble_pack, collate_packs
        >>> batch = collate_packs([assemble_pack([{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5]}])])
        >>> batch["cu_seqlens"].tolist(), batch["input_ids"].shape
        ([0, 3, 5], torch.Size([1, 5]))
    """

    input_ids: torch.Tensor  #: ``[1, T]`` / ``[P, S]`` int64 (HF convention; absent under ``tokens``)
    labels: torch.Tensor  #: ``[1, T]`` / ``[P, S]`` int64, -100 = no loss, convention in ``labels_shifted``
    position_ids: torch.Tensor  #: ``[1, T]`` / ``[P, S]`` int64, MRoPE ``[3, 1, T]`` (HF Qwen-VL: ``[4, 1, T]``)
    loss_mask: torch.Tensor  #: Megatron convention: float32, 1 exactly where a target is
    tokens: torch.Tensor | None  #: Megatron convention: the input ids (None on label-only stages)
    seq_idx: torch.Tensor  #: int32 segment of every token
    padding_mask: torch.Tensor  #: bool, True on alignment, tail and batch padding
    shift_labels: torch.Tensor  #: CP shards of HF batches: the labels, shifted within every segment
    cu_seqlens: torch.Tensor  #: ``(M+1,)`` int32 cumulative *real* lengths (padded: ``[P, maxM+1]``)
    cu_seqlens_padded: torch.Tensor  #: ``(M+1,)`` int32 *physical* segment starts (padded: ``[P, maxM+1]``)
    cu_seq_lens_q: torch.Tensor  #: int32 physical boundaries over the flattened tokens (HF flash-attention)
    cu_seq_lens_k: torch.Tensor  #: the same tensor as ``cu_seq_lens_q``
    cu_pack_tokens: torch.Tensor  #: ``(P+1,)`` int32 token offset of each pack in the flattened batch
    num_sequences: torch.Tensor  #: ``[P]`` int32 documents per pack
    max_seqlen: int | torch.Tensor  #: longest real document
    max_seqlen_padded: int | torch.Tensor  #: longest aligned document
    max_length_q: int | torch.Tensor  #: longest physical segment (HF flash-attention)
    max_length_k: int | torch.Tensor  #: the same value as ``max_length_q``
    total_tokens: int  #: tokens in the batch, padding included
    layout: str  #: ``"thd"`` or ``"padded"``
    labels_shifted: bool  #: False: HF labels (unshifted); True: Megatron (``labels[t]`` is position t's target)
    multi_token_prediction: bool  #: present (True) only on MTP batches: ``to_packed_seq_params`` reads it
    cp_size: int  #: context-parallel shards only
    cp_rank: int  #: context-parallel shards only
    pixel_values: torch.Tensor  #: ``(patches, D)`` media, concatenated in pack order (and the keys below)
    image_grid_thw: torch.Tensor
    pixel_values_videos: torch.Tensor
    video_grid_thw: torch.Tensor
    second_per_grid_ts: torch.Tensor
    input_features: torch.Tensor
    feature_attention_mask: torch.Tensor
    image_grid_hw: torch.Tensor  #: Nemotron-Omni ``(images, 2)``
    input_features_mask: torch.Tensor  #: Nemotron-Omni ``(clips, frames)``
    metadata: dict[str, list]  #: per-pack lists of per-sequence values (``source_index``, sample keys)
