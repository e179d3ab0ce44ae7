"""Audio clips of a packed Parquet row (``audio_paths``, ``audio_frames``, ``audios_per_sequence``) back into
per-sequence Whisper features and Qwen2.5-Omni MRoPE positions, for :class:`PackedParquetDataset`."""

from __future__ import annotations


def add_audio(row, sequences: list[dict], multimodal: dict, *, where: str) -> None:
    """Give every sequence ``input_features (A_i, mel, frames)`` float32 and ``feature_attention_mask (A_i,
    frames)`` int64 for its clips, and ``position_ids (3, L_i)`` from transformers' Qwen2.5-Omni thinker
    ``get_rope_index`` (text, image and audio positions), replacing the Qwen2.5-VL ones.

    Raises:
        ValueError: a clip is missing, undecodable, or its real mel frames differ from ``audio_frames`` (the
            file changed since packing), naming ``where`` and the fix.
    """
    from ..multimodal import AudioSpec, audio_features, load_audio, omni_position_ids

    fields = AudioSpec.__dataclass_fields__
    spec = AudioSpec(**{k: v for k, v in (multimodal.get("audio") or {}).items() if k in fields})
    merge = int(multimodal.get("merge_size", 2))
    paths = row.column("audio_paths")[0].as_py()
    frames = row.column("audio_frames")[0].as_py()
    per_seq = row.column("audios_per_sequence")[0].as_py()
    feats, mask = audio_features([load_audio(p, spec, where) for p in paths], spec)
    if mask.sum(-1).tolist() != frames:
        raise ValueError(
            f"{where}: audio clips changed since packing (mel frames {mask.sum(-1).tolist()} vs recorded {frames}); "
            "re-run packwise pack"
        )
    first = 0
    for seq, n in zip(sequences, per_seq):
        clip_mask = mask[first : first + n]
        seq["position_ids"] = omni_position_ids(
            seq["input_ids"], image_grid_thw=seq.get("image_grid_thw"),
            feature_attention_mask=clip_mask if n else None, spatial_merge_size=merge,
        )  # fmt: skip
        if n:
            seq["input_features"] = feats[first : first + n]
            seq["feature_attention_mask"] = clip_mask
        first += n
    if first != len(paths):
        raise ValueError(
            f"{where}: audios_per_sequence sums to {first} but the pack lists {len(paths)} clips; "
            "the data was modified — re-run packwise pack"
        )
