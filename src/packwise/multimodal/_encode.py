"""One multimodal chat with in-memory media (an Energon sample, a recipe) -> the fields a pack needs.

Message parts ``{"type": "text", "text"}``, ``{"type": "image"}``, ``{"type": "video"}`` and ``{"type": "audio"}``
take the next entry of ``images`` (PIL images) / ``videos`` (lists of PIL frames) / ``audios`` (float32 waveforms
at ``AudioSpec.sampling_rate``) in order. Videos follow Qwen2.5-VL (``<|video_pad|>`` tokens, see ``_video``).
Images follow Qwen2.5-VL (``<|vision_start|>`` + ``t·h·w/merge²`` ``<|image_pad|>`` + ``<|vision_end|>``),
audio Qwen2.5-Omni (``<|audio_bos|>`` + n ``<|AUDIO|>`` + ``<|audio_eos|>``). ``mm_token_type_ids`` follows
transformers' ``ProcessorMixin.create_mm_token_type_ids``: 0 text, 1 image, 2 video, 3 audio.
"""

from __future__ import annotations

from typing import Any, Literal, cast

import numpy as np

from ..constants import IGNORE_INDEX
from ._audio import AudioSpec, audio_features, omni_position_ids
from ._images import VisionSpec, image_grid, mrope_position_ids, process_images_in_memory, qwen3_vl_position_ids

_V_START, _V_PAD, _V_END = "<|vision_start|>", "<|image_pad|>", "<|vision_end|>"


def encode_media_chat(
    messages: list[dict],
    tokenizer,
    *,
    images=(),
    audios=(),
    videos=(),
    video_fps=None,
    vision: VisionSpec | None = None,
    audio: AudioSpec | None = None,
    rope: Literal["qwen2_5_vl", "qwen2_5_omni", "qwen3_vl"] | None = None,
    where: str = "sample",
) -> dict:
    """Tokenize one chat with its media; every media item is counted against its placeholder tokens.

    Returns:
        ``input_ids (L,)`` int64, ``labels (L,)`` int64 (-100 outside assistant turns), ``mm_token_type_ids
        (L,)`` int64, ``position_ids (3, L)`` int64 MRoPE (Qwen2.5-VL's rope index without audio, Qwen2.5-Omni's
        with audio or ``rope="qwen2_5_omni"``, Qwen3-VL's with ``rope="qwen3_vl"``: patch 16 given by ``vision``,
        videos as timestamped frames, no ``second_per_grid_ts``), and when present ``pixel_values (patches,
        1176)`` float32, ``image_grid_thw (I, 3)`` int64, ``input_features (A, 128, 3000)`` float32,
        ``feature_attention_mask (A, 3000)`` int64, ``pixel_values_videos (patches, 1176)`` float32,
        ``video_grid_thw (V, 3)`` int64 and ``second_per_grid_ts (V,)`` float32 (``temporal_patch_size / fps``;
        ``video_fps`` one rate per video, default 2.0 frames/s).

    Raises:
        ValueError: more or fewer media parts than ``images`` / ``videos`` / ``audios``, or an unknown part type.

    Example:
        >>> from PIL import Image
        >>> from packwise.text import load_tokenizer
        >>> chat = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What?"}]},
        ...         {"role": "assistant", "content": "Grey."}]
        >>> f = encode_media_chat(chat, load_tokenizer("qwen2.5"), images=[Image.new("RGB", (56, 56))])
        >>> int((f["mm_token_type_ids"] == 1).sum()), f["image_grid_thw"].tolist(), tuple(f["pixel_values"].shape)
        (4, [[1, 4, 4]], (16, 1176))
    """
    import torch

    from ..text import check_chats, special_token_pattern
    from ..text._chat import _encode_chats

    vision, audio = vision or VisionSpec(), audio or AudioSpec()
    if rope not in (None, "qwen2_5_vl", "qwen2_5_omni", "qwen3_vl"):
        raise ValueError(f"rope={rope!r}; use 'qwen2_5_vl', 'qwen2_5_omni' or 'qwen3_vl'")
    if rope == "qwen3_vl" and len(audios):
        raise ValueError(f"{where}: rope='qwen3_vl' takes images and videos, not audio (use rope='qwen2_5_omni')")

    from ._video import DEFAULT_FPS, VIDEO_TOKEN_ID, process_video

    images, audios, videos = list(images), list(audios), [list(v) for v in videos]
    fps = [DEFAULT_FPS] * len(videos) if video_fps is None else [float(f) for f in video_fps]
    if len(fps) != len(videos):
        raise ValueError(f"{where}: {len(fps)} video_fps for {len(videos)} videos; give one rate per video")
    vids = [process_video(v, vision, where) for v in videos]
    grids, feats, mask = [], None, None
    if audios:
        feats, mask = audio_features(audios, audio)
    frames = [] if mask is None else mask.sum(-1).tolist()
    n_img = n_aud = n_vid = 0
    out_msgs = []
    for j, m in enumerate(messages):
        content = m["content"]
        if isinstance(content, list):
            parts = []
            for part in content:
                kind = part.get("type") if isinstance(part, dict) else None
                if kind == "text":
                    parts.append(part["text"])
                elif kind == "image" and n_img < len(images):
                    grids.append(image_grid(images[n_img], vision))
                    parts.append(_V_START + _V_PAD * vision.tokens(grids[-1]) + _V_END)
                    n_img += 1
                elif kind == "video" and n_vid < len(videos) and rope == "qwen3_vl":
                    parts.append(_qwen3_video(vids[n_vid][1], len(videos[n_vid]), fps[n_vid], vision))
                    n_vid += 1
                elif kind == "video" and n_vid < len(videos):
                    parts.append(_V_START + "<|video_pad|>" * vision.tokens(vids[n_vid][1]) + _V_END)
                    n_vid += 1
                elif kind == "audio" and n_aud < len(audios):
                    parts.append(audio.placeholder(tokenizer, frames[n_aud]))
                    n_aud += 1
                else:
                    raise ValueError(
                        f"{where}: messages[{j}] part {part!r}: expected a text part, or an image/video/audio part "
                        f"with an entry left in images ({len(images)}) / videos ({len(videos)}) / audios "
                        f"({len(audios)})"
                    )
            content = "".join(parts)
        out_msgs.append({**m, "content": content})
    if (n_img, n_aud, n_vid) != (len(images), len(audios), len(videos)):
        raise ValueError(
            f"{where}: {n_img} image, {n_vid} video and {n_aud} audio parts for {len(images)} images, "
            f"{len(videos)} videos, {len(audios)} clips"
        )
    check_chats([messages], special_token_pattern(tokenizer), lambda i: where)  # the user's text, not ours
    [encoded] = _encode_chats([out_msgs], tokenizer)
    token_ids, loss = cast("tuple[np.ndarray, np.ndarray]", encoded)  # unchecked (media tokens are ours); never None
    ids = torch.from_numpy(token_ids.astype(np.int64))
    types = torch.zeros_like(ids)
    types[ids == vision.image_token_id] = 1
    types[ids == VIDEO_TOKEN_ID] = 2
    types[ids == audio.audio_token_id] = 3
    need_vid = sum(vision.tokens(g) for _, g in vids)
    if int((types == 2).sum()) != need_vid:
        raise ValueError(f"{where}: {int((types == 2).sum())} <|video_pad|> tokens but the videos need {need_vid}")
    need_img = sum(vision.tokens(g) for g in grids)
    need_aud = sum(audio.tokens(f) for f in frames)
    if int((types == 1).sum()) != need_img or int((types == 3).sum()) != need_aud:
        raise ValueError(
            f"{where}: {int((types == 1).sum())} image / {int((types == 3).sum())} audio placeholder tokens but the "
            f"media need {need_img} / {need_aud}; remove literal placeholder tokens from the text"
        )
    out: dict[str, Any] = {  # tensors, and None where a model input is absent
        "input_ids": ids,
        "labels": torch.where(torch.from_numpy(loss), ids, IGNORE_INDEX),
        "mm_token_type_ids": types,
    }
    grid_t = torch.as_tensor(grids, dtype=torch.int64).reshape(-1, 3)
    if images:
        out["pixel_values"], out["image_grid_thw"] = process_images_in_memory(images, vision)
    if audios:
        out["input_features"], out["feature_attention_mask"] = feats, mask
    vgrid, secs = None, None
    if videos:
        vgrid = torch.stack([g for _, g in vids]).to(torch.int64)
        secs = torch.tensor([vision.temporal_patch_size / f for f in fps], dtype=torch.float32)
        out["pixel_values_videos"] = torch.cat([pv for pv, _ in vids])
        out["video_grid_thw"], out["second_per_grid_ts"] = vgrid, secs
    if rope == "qwen3_vl":
        out.pop("second_per_grid_ts", None)  # Qwen3-VL reads time from the timestamp text, not from this field
        out["position_ids"] = qwen3_vl_position_ids(
            ids, types, grid_t, video_grid_thw=vgrid, spatial_merge_size=vision.merge_size
        )
    elif audios or rope == "qwen2_5_omni":
        out["position_ids"] = omni_position_ids(
            ids, image_grid_thw=grid_t if images else None, feature_attention_mask=mask if audios else None,
            video_grid_thw=vgrid, second_per_grid_ts=secs, spatial_merge_size=vision.merge_size,
        )  # fmt: skip
    else:
        out["position_ids"] = mrope_position_ids(
            ids, types, grid_t, spatial_merge_size=vision.merge_size, video_grid_thw=vgrid, second_per_grid_ts=secs
        )
    return out


def _qwen3_video(grid, frames: int, fps: float, vision: VisionSpec) -> str:
    """Qwen3-VL's video text (``Qwen3VLProcessor.replace_video_token``): per temporal patch ``<{t:.1f} seconds>``
    then ``<|vision_start|>`` + ``h·w/merge²`` ``<|video_pad|>`` + ``<|vision_end|>``; ``t`` is the mean time of
    the patch's first and last frame (``_calculate_timestamps``; the last patch repeats the last frame)."""
    tps = vision.temporal_patch_size
    idx = list(range(frames)) + [frames - 1] * (-frames % tps)
    per = int(grid[1]) * int(grid[2]) // vision.merge_size**2
    return "".join(
        f"<{(idx[i] + idx[i + tps - 1]) / 2 / fps:.1f} seconds>" + _V_START + "<|video_pad|>" * per + _V_END
        for i in range(0, len(idx), tps)
    )
