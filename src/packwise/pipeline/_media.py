"""Images and audio in the offline pipeline: token/media consistency, the blocks overflow never cuts, Parquet columns.

Invariant kept everywhere: a sequence's ``<|image_pad|>`` tokens are exactly ``Σ t·h·w / merge²`` over its
images, and its audio tokens exactly ``Σ tokens(frames)`` over its clips (Qwen2-Audio's rule), in order.
Overflow never cuts inside an image's ``<|vision_start|> … <|vision_end|>`` or a clip's ``<|audio_bos|> …
<|audio_eos|>`` block: it truncates before the block (the media item and its tokens go together, counted) or
drops the sample. A media reference is ``(path, (t, h, w))`` for an image and ``(path, frames)`` for a clip.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ..files import BadRow, resolve_media_path  # noqa: F401  (re-exported: pipeline's layer API)
from ..multimodal import AudioSpec, NemotronOmniSpec, VisionSpec

MM_COLUMN = "mm_token_type_ids"
AUDIO = AudioSpec()  # the offline pipeline featurizes with the Qwen2.5-Omni / Qwen2-Audio defaults


VIDEO_PAD = 151656  # <|video_pad|>


def is_audio(ref) -> bool:
    """True for an audio reference ``(path, frames)``, False for an image ``(path, (t, h, w))``."""
    return isinstance(ref[1], int)


def is_video(ref) -> bool:
    """True for a video reference ``((paths...), (t, h, w), second_per_grid_t)``."""
    return len(ref) == 3


def default_media_root(name) -> Path | None:
    """The media root when none is given: the input file's folder (a directory input: itself). None for
    in-memory rows (built by the caller's own code, not read from a file): paths are then taken as given,
    relative ones from the working directory."""
    path = Path(str(name))
    try:
        if path.is_file():
            return path.resolve().parent
        if path.is_dir():
            return path.resolve()
    except OSError:
        pass
    return None


def with_media_root(vision: VisionSpec | None, name) -> VisionSpec:
    """``vision`` with ``media_root`` resolved to an absolute folder (default: :func:`default_media_root`)."""
    vision = vision or VisionSpec()
    root = Path(vision.media_root).expanduser().resolve() if vision.media_root else default_media_root(name)
    return replace(vision, media_root=None if root is None else str(root))


def media_token_types(ids: np.ndarray, refs: list, spec: VisionSpec, where: str) -> np.ndarray:
    """``(L,)`` int8 ``mm_token_type_ids`` (0 text, 1 image, 3 audio — transformers' numbering) after checking
    the counts against the images and clips.

    Raises:
        BadRow: the number of ``<|image_pad|>`` (audio) tokens differs from what the images (clips) need (e.g. a
            literal vision or audio token typed in the text).
    """
    clips = [f for r in refs if is_audio(r) for f in [r[1]]]
    videos = [r[1] for r in refs if is_video(r)]
    is_video_tok = ids == VIDEO_PAD
    need_video = sum(spec.tokens(g) for g in videos)
    if int(is_video_tok.sum()) != need_video:
        raise BadRow(
            where, "messages", f"holds {int(is_video_tok.sum())} <|video_pad|> tokens but its {len(videos)} video(s) "
            f"need {need_video}; remove literal vision tokens from the text",
        )  # fmt: skip
    blocks = len([r for r in refs if not is_audio(r)])  # images and videos both sit in vision blocks
    refs = [r for r in refs if not is_audio(r) and not is_video(r)]
    is_audio_tok = ids == AUDIO.audio_token_id
    need_audio = sum(audio_tokens(f, spec) for f in clips)
    if int(is_audio_tok.sum()) != need_audio:
        raise BadRow(
            where, "messages", f"holds {int(is_audio_tok.sum())} audio tokens (id {AUDIO.audio_token_id}) but its "
            f"{len(clips)} clip(s) need {need_audio}; remove literal audio tokens from the text",
        )  # fmt: skip
    for token in (AUDIO.audio_start_token_id, AUDIO.audio_end_token_id):
        if int((ids == token).sum()) != len(clips):
            raise BadRow(
                where, "messages", f"holds {int((ids == token).sum())} audio start/end tokens (id {token}) for "
                f"{len(clips)} clip(s); remove literal audio tokens from the text",
            )  # fmt: skip
    is_image = ids == spec.image_token_id
    need = sum(spec.tokens(g) for _, g in refs)
    if int(is_image.sum()) != need:
        raise BadRow(
            where, "messages", f"holds {int(is_image.sum())} <|image_pad|> tokens but its {len(refs)} image(s) need "
            f"{need}; remove literal vision tokens from the text or fix the image list",
        )  # fmt: skip
    for token, name in ((spec.vision_start_token_id, "<|vision_start|>"), (spec.vision_end_token_id, "<|vision_end|>")):
        count = int((ids == token).sum())
        if count != blocks:
            raise BadRow(
                where, "messages",
                f"holds {count} {name} tokens for {blocks} image(s)/video(s); remove literal vision tokens from the "
                "text",
            )  # fmt: skip
    return (is_image.astype(np.int8) + 2 * is_video_tok.astype(np.int8) + 3 * is_audio_tok.astype(np.int8)).astype(
        np.int8
    )


def audio_tokens(frames: int, spec: VisionSpec) -> int:
    """Audio placeholder tokens of a clip of ``frames`` real mel frames under ``spec.media_family``: Qwen2-Audio's
    rule, or Nemotron-Omni's (``frames = samples // hop``, see :meth:`NemotronOmniSpec.audio_tokens`)."""
    if spec.media_family == "nemotron-omni":
        omni = NemotronOmniSpec()
        return omni.audio_tokens(frames * omni.hop_length)
    return AUDIO.tokens(frames)


def media_blocks(ids: np.ndarray, spec: VisionSpec) -> list[tuple[int, int]]:
    """``[(start, end), ...]`` (end exclusive) of every image/video and audio block, from its start marker to its
    end marker, in text order (the order of the references): the spans :func:`~packwise.pipeline.cut_points`
    never cuts inside."""
    out: list[tuple[int, int]] = []
    for start, end in ((spec.vision_start_token_id, spec.vision_end_token_id),
                       (AUDIO.audio_start_token_id, AUDIO.audio_end_token_id)):  # fmt: skip
        out += zip(np.flatnonzero(ids == start).tolist(), (np.flatnonzero(ids == end) + 1).tolist())
    return sorted(out)


def image_digest(path) -> str:
    """SHA-256 (hex) of an image file's bytes: recorded per image at pack time (``image_sha256``) and checked
    when the image is materialised again, so a file replaced by another of the same size is detected."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def media_arrays(
    media: list[list], order: np.ndarray, seq_offsets: np.ndarray, *, media_root: str | None = None
) -> dict[str, Any]:
    """Flat per-image paths (as recorded: relative to ``media_root``), content hashes and grids in pack order,
    plus images per sequence (for table slicing); the same for audio clips (paths, real mel frames) under
    ``"audio"`` and videos under ``"video"`` when any sequence has one."""
    images = [[r for r in m if not is_audio(r) and not is_video(r)] for m in media]
    out: dict[str, Any] = _arrays(images, order, seq_offsets)  # arrays; "video"/"audio": dicts of arrays
    root = Path(media_root) if media_root else None
    digests = {p: image_digest(root / p if root else p) for p in dict.fromkeys(out["paths"].tolist())}
    out["sha256"] = np.asarray([digests[p] for p in out["paths"].tolist()], dtype=object)
    videos = [[r for r in m if is_video(r)] for m in media]
    if any(videos):
        out["video"] = _arrays([[(r[0], r[1]) for r in m] for m in videos], order, seq_offsets)
        out["video"]["secs"] = np.asarray([r[2] for i in order.tolist() for r in videos[i]], dtype=np.float32)
    clips = [[r for r in m if is_audio(r)] for m in media]
    if any(clips):
        out["audio"] = _arrays(clips, order, seq_offsets)
    return out


def _arrays(media: list[list], order: np.ndarray, seq_offsets: np.ndarray) -> dict[str, np.ndarray]:
    per_seq = np.asarray([len(media[i]) for i in order.tolist()], dtype=np.int32)
    paths = [p for i in order.tolist() for p, _ in media[i]]
    paths_arr = np.empty(len(paths), dtype=object)
    paths_arr[:] = paths
    grids = np.asarray([g for i in order.tolist() for _, g in media[i]], dtype=np.int32)
    seq_image_offsets = np.zeros(per_seq.shape[0] + 1, dtype=np.int64)
    np.cumsum(per_seq, out=seq_image_offsets[1:])
    pack_image_offsets = seq_image_offsets[seq_offsets]
    return {
        "per_seq": per_seq,
        "paths": paths_arr,
        "grids": grids,
        "pack_offsets": pack_image_offsets,
    }


def media_columns(arrays: dict, start: int, stop: int, seq_off: np.ndarray, s0: int, s1: int) -> dict[str, pa.Array]:
    """``image_paths`` list<string>, ``image_grid_thw`` list<list<int32>>, ``images_per_sequence`` list<int32>;
    with audio also ``audio_paths`` list<string>, ``audio_frames`` list<int32> (real mel frames per clip) and
    ``audios_per_sequence`` list<int32>."""
    out = _image_columns(arrays, start, stop, seq_off, s0, s1)
    if "audio" in arrays:
        a = arrays["audio"]
        i0, i1 = int(a["pack_offsets"][start]), int(a["pack_offsets"][stop])
        off = pa.array((a["pack_offsets"][start : stop + 1] - i0).astype(np.int32))
        out["audio_paths"] = pa.ListArray.from_arrays(off, pa.array(list(a["paths"][i0:i1]), pa.string()))
        out["audio_frames"] = pa.ListArray.from_arrays(off, pa.array(a["grids"][i0:i1].reshape(-1), pa.int32()))
        out["audios_per_sequence"] = pa.ListArray.from_arrays(
            pa.array(seq_off.astype(np.int32)), pa.array(a["per_seq"][s0:s1])
        )
    if "video" in arrays:
        v = arrays["video"]
        i0, i1 = int(v["pack_offsets"][start]), int(v["pack_offsets"][stop])
        off = pa.array((v["pack_offsets"][start : stop + 1] - i0).astype(np.int32))
        grids = pa.FixedSizeListArray.from_arrays(pa.array(v["grids"].reshape(-1, 3)[i0:i1].reshape(-1)), 3)
        out["video_paths"] = pa.ListArray.from_arrays(
            off, pa.array([list(q) for q in v["paths"][i0:i1]], pa.list_(pa.string()))
        )
        out["video_grid_thw"] = pa.ListArray.from_arrays(off, grids)
        out["second_per_grid_ts"] = pa.ListArray.from_arrays(off, pa.array(v["secs"][i0:i1], pa.float32()))
        out["videos_per_sequence"] = pa.ListArray.from_arrays(
            pa.array(seq_off.astype(np.int32)), pa.array(v["per_seq"][s0:s1])
        )
    return out


def _image_columns(arrays: dict, start: int, stop: int, seq_off: np.ndarray, s0: int, s1: int) -> dict:
    i0, i1 = int(arrays["pack_offsets"][start]), int(arrays["pack_offsets"][stop])
    img_off = (arrays["pack_offsets"][start : stop + 1] - i0).astype(np.int32)
    grids = pa.FixedSizeListArray.from_arrays(pa.array(arrays["grids"].reshape(-1, 3)[i0:i1].reshape(-1)), 3)
    return {
        "image_paths": pa.ListArray.from_arrays(pa.array(img_off), pa.array(list(arrays["paths"][i0:i1]), pa.string())),
        "image_sha256": pa.ListArray.from_arrays(
            pa.array(img_off), pa.array(list(arrays["sha256"][i0:i1]), pa.string())
        ),
        "image_grid_thw": pa.ListArray.from_arrays(pa.array(img_off), grids),
        "images_per_sequence": pa.ListArray.from_arrays(
            pa.array(seq_off.astype(np.int32)), pa.array(arrays["per_seq"][s0:s1])
        ),
    }
