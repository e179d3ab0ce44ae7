"""Shared constants (no torch: every layer imports them)."""

from __future__ import annotations

from typing import Literal

#: Label that carries no loss (PyTorch ``cross_entropy``'s default ``ignore_index``; HF convention).
IGNORE_INDEX = -100

#: Qwen2.5-Omni's audio placeholder ids ``<|AUDIO|>``, ``<|audio_bos|>``, ``<|audio_eos|>`` (the Qwen2.5 BPE's
#: added tokens at those ids): ``multimodal.AudioSpec``'s defaults and the literal-token check of ``text``.
AUDIO_TOKEN_ID, AUDIO_START_TOKEN_ID, AUDIO_END_TOKEN_ID = 151646, 151647, 151648

#: The model family whose media encoding the offline pipeline writes and ``PackedParquetDataset`` re-materialises:
#: Qwen2.5-VL/Omni (14-px patches, MRoPE, Whisper features) or Nemotron-Omni (``nemotron_h_omni``: 16-px RADIO
#: patches with ``image_grid_hw``, Parakeet mel ``input_features_mask``, 1-D positions). Recorded in metadata.json.
MediaFamily = Literal["qwen2.5-vl", "nemotron-omni"]

Kind = Literal["input", "token", "boundary", "scalar", "media", "metadata"]

#: Every key packwise puts in a batch -> ``(kind, read by HF models)``. Kinds: ``input`` — a per-token
#: column that also exists in the rows (``[1, T]`` thd / ``[P, S]`` padded); ``token`` — a per-token tensor
#: packwise computes; ``boundary`` — boundaries and counts, not per token; ``scalar`` — Python values (or
#: 0-d tensors); ``media`` — per-sample tensors concatenated in pack order; ``metadata`` — per-pack lists.
BATCH_KEYS: dict[str, tuple[Kind, bool]] = {
    "input_ids": ("input", True),
    "labels": ("input", True),
    "position_ids": ("input", True),
    "loss_mask": ("input", False),
    "tokens": ("input", False),
    "seq_idx": ("token", False),
    "padding_mask": ("token", False),
    "shift_labels": ("token", False),
    "cu_seqlens": ("boundary", False),
    "cu_seqlens_padded": ("boundary", False),
    "cu_seq_lens_q": ("boundary", True),
    "cu_seq_lens_k": ("boundary", True),
    "cu_pack_tokens": ("boundary", False),
    "num_sequences": ("boundary", False),
    "max_seqlen": ("scalar", False),
    "max_seqlen_padded": ("scalar", False),
    "max_length_q": ("scalar", True),
    "max_length_k": ("scalar", True),
    "total_tokens": ("scalar", False),
    "layout": ("scalar", False),
    "labels_shifted": ("scalar", False),
    "multi_token_prediction": ("scalar", False),
    "cp_size": ("scalar", False),
    "cp_rank": ("scalar", False),
    "pixel_values": ("media", False),
    "image_grid_thw": ("media", False),
    "pixel_values_videos": ("media", False),
    "video_grid_thw": ("media", False),
    "second_per_grid_ts": ("media", False),
    "input_features": ("media", False),
    "feature_attention_mask": ("media", False),
    "image_grid_hw": ("media", False),  # Nemotron-Omni: (images, 2) patch grid
    "input_features_mask": ("media", False),  # Nemotron-Omni: (clips, frames) real mel frames
    "metadata": ("metadata", False),
}


def keys_of(*kinds: Kind) -> tuple[str, ...]:
    """The keys of :data:`BATCH_KEYS` of the given kinds, in its order.

    Example:
        >>> keys_of("boundary")
        ('cu_seqlens', 'cu_seqlens_padded', 'cu_seq_lens_q', 'cu_seq_lens_k', 'cu_pack_tokens', 'num_sequences')
    """
    return tuple(k for k, (kind, _) in BATCH_KEYS.items() if kind in kinds)


#: Names the assembler and collator produce: a per-token input column may not take them.
PRODUCED = keys_of("token", "boundary", "scalar", "metadata")
