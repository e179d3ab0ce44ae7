"""Audio clips and videos of a packed Parquet row back into per-sequence tensors, for
:class:`PackedParquetDataset`: Whisper features and Qwen2.5-Omni MRoPE positions from ``audio_paths``,
``audio_frames``, ``audios_per_sequence``; ``pixel_values_videos`` and Qwen2.5-VL temporal MRoPE from
``video_paths``, ``video_grid_thw``, ``second_per_grid_ts``, ``videos_per_sequence``."""

from __future__ import annotations

from pathlib import Path


def _full(path: str, multimodal: dict) -> str:
    """A recorded media path joined to the output's media root (absolute paths stay as they are)."""
    root = multimodal.get("media_root")
    return str(Path(root) / path) if root else path


def add_audio(row, sequences: list[dict], multimodal: dict, *, where: str) -> None:
    """Give every sequence ``input_features (A_i, mel, frames)`` float32 and ``feature_attention_mask (A_i,
    frames)`` int64 for its clips, and ``position_ids (3, L_i)`` from transformers' Qwen2.5-Omni thinker
    ``get_rope_index`` (text, image and audio positions), replacing the Qwen2.5-VL ones.

    Raises:
        ValueError: a clip is missing, undecodable, or its real mel frames differ from ``audio_frames`` (the
            file changed since packing), naming ``where`` and the fix.
    """
    from ...multimodal import AudioSpec, audio_features, load_audio, omni_position_ids

    fields = AudioSpec.__dataclass_fields__
    spec = AudioSpec(**{k: v for k, v in (multimodal.get("audio") or {}).items() if k in fields})
    merge = int(multimodal.get("merge_size", 2))
    paths = row.column("audio_paths")[0].as_py()
    frames = row.column("audio_frames")[0].as_py()
    per_seq = row.column("audios_per_sequence")[0].as_py()
    feats, mask = audio_features([load_audio(_full(p, multimodal), spec, where) for p in paths], spec)
    if mask.sum(-1).tolist() != frames:
        raise ValueError(
            f"{where}: audio clips changed since packing (mel frames {mask.sum(-1).tolist()} vs recorded {frames}); "
            "re-run packwise pack"
        )
    first = 0
    for seq, n in zip(sequences, per_seq):
        clip_mask = mask[first : first + n]
        seq["position_ids"] = omni_position_ids(
            seq["input_ids"], image_grid_thw=seq.get("image_grid_thw"), video_grid_thw=seq.get("video_grid_thw"),
            second_per_grid_ts=seq.get("second_per_grid_ts"), feature_attention_mask=clip_mask if n else None,
            spatial_merge_size=merge,
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


def add_video(row, sequences: list[dict], multimodal: dict, *, where: str) -> None:
    """Give every sequence ``pixel_values_videos (patches, 1176)`` float32, ``video_grid_thw (V_i, 3)`` int64 and
    ``second_per_grid_ts (V_i,)`` float32 for its videos, and ``position_ids (3, L_i)`` from transformers'
    Qwen2.5-VL ``get_rope_index`` with its images and videos.

    Raises:
        ValueError: a video is missing, undecodable, or its grid differs from ``video_grid_thw`` (the file
            changed since packing), naming ``where`` and the fix.
    """
    import torch

    from ...multimodal import VisionSpec, mrope_position_ids, process_video, video_frames

    fields = VisionSpec.__dataclass_fields__
    spec = VisionSpec(**{k: v for k, v in multimodal.items() if k in fields})
    paths = row.column("video_paths")[0].as_py()
    grids = torch.tensor(row.column("video_grid_thw")[0].as_py(), dtype=torch.int64).reshape(-1, 3)
    secs = torch.tensor(row.column("second_per_grid_ts")[0].as_py(), dtype=torch.float32)
    per_seq = row.column("videos_per_sequence")[0].as_py()
    pixels = []
    for k, p in enumerate(paths):
        pv, grid = process_video(video_frames(tuple(_full(q, multimodal) for q in p), where)[0], spec, where)
        if grid.tolist() != grids[k].tolist():
            raise ValueError(
                f"{where}: video {p} changed since packing (grid {grid.tolist()} vs recorded {grids[k].tolist()}); "
                "re-run packwise pack"
            )
        pixels.append(pv)
    first = 0
    for seq, n in zip(sequences, per_seq):
        if n:
            seq["pixel_values_videos"] = torch.cat(pixels[first : first + n])
            seq["video_grid_thw"], seq["second_per_grid_ts"] = grids[first : first + n], secs[first : first + n]
        mm = seq.get("mm_token_type_ids", torch.zeros_like(seq["input_ids"]))
        seq["position_ids"] = mrope_position_ids(
            seq["input_ids"], mm, seq.get("image_grid_thw", torch.zeros(0, 3, dtype=torch.int64)),
            spatial_merge_size=spec.merge_size, video_grid_thw=seq.get("video_grid_thw"),
            second_per_grid_ts=seq.get("second_per_grid_ts"),
        )  # fmt: skip
        first += n
    if first != len(paths):
        raise ValueError(
            f"{where}: videos_per_sequence sums to {first} but the pack lists {len(paths)} videos; "
            "the data was modified — re-run packwise pack"
        )
