"""One definition of the batch's keys: ``BATCH_KEYS`` / ``PackedBatch``; every other key list derives from it."""

from __future__ import annotations

import typing

import torch

from packwise.assemble import (
    BATCH_KEYS,
    NON_TOKEN_KEYS,
    PackCollator,
    PackedBatch,
    assemble_batch,
    assemble_pack,
    collate_packs,
    shard_for_context_parallel,
)
from packwise.assemble._batch import HF_KEYS, MEDIA_KEYS, PRODUCED
from packwise.hf import PackedDataCollator

SEQS = [
    {"input_ids": [1, 2, 3], "mm_token_type_ids": [0, 1, 1]},
    {"input_ids": [4, 5, 6, 7], "mm_token_type_ids": [0] * 4},
]


def test_typed_dict_and_registry_name_the_same_keys():
    assert list(typing.get_type_hints(PackedBatch)) == list(BATCH_KEYS)


def test_derived_lists_keep_their_values():
    """The lists that used to be written out by hand (collate's NON_TOKEN_KEYS, hf's HF_KEYS, the media keys)
    are unchanged (media: + Nemotron-Omni's two); PRODUCED (names a per-token column may not take) gained the produced keys it had missed."""
    assert HF_KEYS == ("input_ids", "labels", "position_ids", "cu_seq_lens_q", "cu_seq_lens_k", "max_length_q",
                       "max_length_k")  # fmt: skip
    assert MEDIA_KEYS == ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw",
                          "second_per_grid_ts", "input_features", "feature_attention_mask", "image_grid_hw",
                          "input_features_mask")  # fmt: skip
    assert {
        "cu_seqlens", "cu_seqlens_padded", "cu_seq_lens_q", "cu_seq_lens_k", "cu_pack_tokens", "num_sequences",
        "max_seqlen", "max_seqlen_padded", "max_length_q", "max_length_k", "total_tokens", "metadata", "layout",
        *MEDIA_KEYS, "cp_size", "cp_rank", "labels_shifted", "multi_token_prediction",
    } == NON_TOKEN_KEYS  # fmt: skip
    old = {"cu_seqlens", "cu_seqlens_padded", "max_seqlen", "seq_idx", "padding_mask", "total_tokens",
           "cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k", "num_sequences", "cu_pack_tokens",
           "layout", "metadata"}  # fmt: skip
    assert set(PRODUCED) == old | {"max_seqlen_padded", "labels_shifted", "cp_size", "cp_rank", "shift_labels",
                                   "multi_token_prediction"}  # fmt: skip


def _keys(batch) -> set[str]:
    return set(batch) - {"mm_token_type_ids"}  # the one extra per-token column of SEQS


def test_every_key_packwise_emits_is_registered():
    pack = assemble_pack(SEQS, alignment=4)
    batches = [
        collate_packs([pack]),
        collate_packs([pack], layout="padded"),
        collate_packs([pack], labels="shifted", max_seqlen="tensor"),
        assemble_batch([SEQS]),
        shard_for_context_parallel(collate_packs([pack]), cp_size=2, cp_rank=1),
        PackedDataCollator()([{"input_ids": [1, 2, 3]}]),
        PackCollator(labels="shifted", multi_token_prediction=True)([pack]),
    ]
    for batch in batches:
        assert _keys(batch) <= set(BATCH_KEYS), _keys(batch) - set(BATCH_KEYS)
        for name, value in batch.items():  # non-token keys are exactly what is not per token
            if name not in NON_TOKEN_KEYS and isinstance(value, torch.Tensor):
                assert value.shape[-1] == batch["labels"].shape[-1], name
