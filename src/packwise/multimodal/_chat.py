"""Multimodal chats: image parts (or LLaVA-style ``<image>`` placeholders) become Qwen2.5 vision tokens.

A message's ``content`` may be a list of parts ``{"type": "text", "text": ...}`` and
``{"type": "image", "path": ...}`` and ``{"type": "audio", "path": ...}`` (wav/flac, Qwen2.5-Omni thinker /
Qwen2-Audio: ``<|audio_bos|>`` + n ``<|AUDIO|>`` + ``<|audio_eos|>``, n from the model's rule); or a row may
carry ``"images": [path, ...]`` with one ``<image>``
placeholder per image in the message text. Each image becomes ``<|vision_start|>`` + ``n × <|image_pad|>`` +
``<|vision_end|>`` with ``n = t·h·w / merge²`` from its size, before the chat template is applied, so
any template that renders string content works and the planner sees the true length.
"""

from __future__ import annotations

from pathlib import Path

from ..files import BadRow
from ._audio import AudioSpec, audio_features, load_audio
from ._images import VisionSpec, image_grid, load_image
from ._nemotron import NemotronOmniSpec, nemotron_audio

PLACEHOLDER = "<image>"
VISION_START, IMAGE_PAD, VISION_END = "<|vision_start|>", "<|image_pad|>", "<|vision_end|>"


def is_multimodal(row: dict, key: str = "messages") -> bool:
    """True when a row has image parts or an ``images`` list."""
    if row.get("images") is not None:
        return True
    msgs = row.get(key)
    return isinstance(msgs, list) and any(isinstance(m, dict) and isinstance(m.get("content"), list) for m in msgs)


def _media_path(path, base_dir: Path | None, spec: VisionSpec, where: str, field: str, kind: str) -> Path:
    """The one path check for every media kind (image, video, frame, audio): the absolute path, refused when it
    leaves the media root (``spec.media_root``; default the input's folder ``base_dir``) — see
    :func:`packwise.files.resolve_media_path`.

    Raises:
        BadRow: naming the row, the field, the path and the fix.
    """
    from ..files import resolve_media_path

    root = spec.media_root if spec.media_root is not None else base_dir  # base_dir: the input's folder
    return resolve_media_path(path, base=base_dir, media_root=root, where=where, field=field, kind=kind)


def _recorded(full: Path, spec: VisionSpec) -> str:
    """How a media path is recorded in the output: relative to the media root (metadata.json names it)."""
    if spec.media_root is not None:
        return full.relative_to(Path(spec.media_root).resolve()).as_posix()
    return str(full)


def _image(
    path, base_dir: Path | None, spec: VisionSpec, where: str, field: str
) -> tuple[str, tuple[int, int, int], str]:
    full = _media_path(path, base_dir, spec, where, field, "image")
    try:
        image = load_image(full, where)
        if spec.media_family == "nemotron-omni":  # RADIO patches: (1, grid_h, grid_w), merge² patches a token
            grid = (1, *NemotronOmniSpec().grid(image.height, image.width))
        else:
            grid = image_grid(image, spec)
    except ValueError as e:
        raise BadRow(where, field, f"names image {full}, which cannot be read ({e.__cause__ or e})") from e
    text = VISION_START + IMAGE_PAD * spec.tokens(grid) + VISION_END
    if spec.media_root is not None:  # recorded relative to the media root (metadata.json names the root)
        return full.relative_to(Path(spec.media_root).resolve()).as_posix(), grid, text
    return str(full), grid, text


def _video(part: dict, base_dir: Path | None, spec: VisionSpec, where: str, field: str):
    """``(paths, (t, h, w), second_per_grid_t)`` and the text of a ``{"type": "video", "path"}`` (PyAV) or
    ``{"type": "video", "frames": [...], "fps"?}`` part (default 2 frames/s)."""
    from ._video import video_frames, video_grid

    if "frames" in part:
        frames = part["frames"]
        if not isinstance(frames, list) or not frames:
            raise BadRow(where, f"{field}.frames", f"= {frames!r}; expected a non-empty list of image paths")
        paths = [_media_path(f, base_dir, spec, where, f"{field}.frames[{k}]", "frame") for k, f in enumerate(frames)]
    else:
        paths = [_media_path(part.get("path"), base_dir, spec, where, f"{field}.path", "video")]
    try:
        images, fps = video_frames(tuple(str(q) for q in paths), where)
        grid = video_grid(images, spec)
    except ValueError as e:
        raise BadRow(where, field, f"names a video that cannot be used ({e})") from e
    fps = part.get("fps", fps)
    if isinstance(fps, bool) or not isinstance(fps, (int, float)) or fps <= 0:
        raise BadRow(where, f"{field}.fps", f"= {fps!r}; expected a positive number of frames per second")
    text = VISION_START + "<|video_pad|>" * spec.tokens(grid) + VISION_END
    return (tuple(_recorded(q, spec) for q in paths), grid, spec.temporal_patch_size / float(fps)), text


#: The keys each kind of content part may carry (a key with a null value, as a Parquet struct column fills in, is
#: no key): any other is refused by name rather than ignored.
PART_KEYS = {
    "text": {"type", "text"}, "image": {"type", "path"}, "audio": {"type", "path"},
    "video": {"type", "path", "frames", "fps"},
}  # fmt: skip


def _check_part_keys(part, kind, where: str, field: str) -> None:
    """Refuse a key of a content part that packwise would not read (``detail``, ``url``...)."""
    if kind not in PART_KEYS:
        return  # not a known part: refused below, naming the kinds
    extra = sorted(k for k, v in part.items() if v is not None and k not in PART_KEYS[kind])
    url = next((k for k in extra if k in ("url", "image_url", "audio_url", "video_url")), None)
    if url is not None:
        raise BadRow(
            where, f"{field}.{url}", f"is a URL key of a {kind} part; URLs are not supported (packwise reads "
            "no network)", f"download the file first and give its local path as {{type: {kind}, path}}",
        )  # fmt: skip
    if extra:
        raise BadRow(
            where, f"{field}.{extra[0]}", f"is a key a {kind} part does not take (packwise would ignore it); a "
            f"{kind} part holds {', '.join(sorted(PART_KEYS[kind]))}", "drop the key",
        )  # fmt: skip


def audio_tokens_known(tokenizer, spec: AudioSpec) -> bool:
    """True when the tokenizer holds added (special) tokens at the audio ids: ``<|AUDIO|>``/``<|audio_bos|>``/
    ``<|audio_eos|>`` in a Qwen2.5-Omni tokenizer, or the Qwen2.5 added tokens Omni reuses at 151646-151648."""
    ids = [spec.audio_token_id, spec.audio_start_token_id, spec.audio_end_token_id]
    if max(ids) >= len(tokenizer):
        return False
    added = tokenizer.get_added_vocab()
    return all(added.get(t) == i for t, i in zip(tokenizer.convert_ids_to_tokens(ids), ids))


def _audio(
    path, base_dir: Path | None, vision: VisionSpec, spec: AudioSpec, tokenizer, where: str, field: str
) -> tuple[str, int, str]:
    """``(recorded path, real mel frames, placeholder text)`` of one clip (frames from the Whisper features)."""
    full = _media_path(path, base_dir, vision, where, field, "audio")
    if vision.media_family == "nemotron-omni":
        return _nemotron_audio(full, vision, tokenizer, where, field)
    try:
        _, mask = audio_features([load_audio(full, spec, where)], spec)
    except ValueError as e:
        raise BadRow(where, field, f"names audio {full}, which cannot be used ({e})") from e
    frames = int(mask.sum())
    return _recorded(full, vision), frames, spec.placeholder(tokenizer, frames)


def _nemotron_audio(full: Path, vision: VisionSpec, tokenizer, where: str, field: str) -> tuple[str, int, str]:
    """Nemotron-Omni's clip: ``(recorded path, mel frames = samples // hop, placeholder text)`` with
    :meth:`NemotronOmniSpec.audio_tokens` ``<so_embedding>`` tokens between the audio start/end tokens."""
    omni = NemotronOmniSpec()
    try:
        wave = load_audio(full, AudioSpec(sampling_rate=omni.sampling_rate), where)
        nemotron_audio([wave], omni)  # the same checks (clip length) as the loader's features
    except ValueError as e:
        raise BadRow(where, field, f"names audio {full}, which cannot be used ({e})") from e
    start, pad, end = tokenizer.convert_ids_to_tokens(
        [omni.audio_start_token_id, omni.audio_token_id, omni.audio_end_token_id]
    )
    return _recorded(full, vision), len(wave) // omni.hop_length, start + pad * omni.audio_tokens(len(wave)) + end


def expand_images(
    row: dict,
    key: str,
    *,
    base_dir: Path | None,
    spec: VisionSpec,
    where: str,
    audio: AudioSpec | None = None,
    tokenizer=None,
):
    """``(messages with string content, refs)`` with ``refs`` in text order: ``(path, (t, h, w))`` per
    image, ``(absolute path, frames)`` per audio clip (``frames`` real mel frames, an ``int``) and ``((paths...),
    (t, h, w), second_per_grid_t)`` per video (one path for a file, the frame paths for a frame list). Audio parts
    need ``tokenizer`` (its strings for the audio ids are used, see :meth:`AudioSpec.placeholder`). Paths are
    recorded relative to ``spec.media_root`` when it is set, else absolute.

    Raises:
        BadRow: a malformed part, a missing or unreadable image or clip, or ``<image>`` placeholders whose count
            differs from ``images``.
    """
    images = row.get("images")
    if images is not None and not isinstance(images, list):
        raise BadRow(where, "images", f"is a {type(images).__name__}, expected a list of image paths")
    queue = list(images or [])
    placeholders = 0
    refs: list[tuple] = []  # image, audio and video refs: see above
    out = []
    for j, m in enumerate(row[key]):
        content = m["content"]
        if isinstance(content, list):
            parts = []
            for q, part in enumerate(content):
                field = f"{key}[{j}].content[{q}]"
                kind = part.get("type") if isinstance(part, dict) else None
                _check_part_keys(part, kind, where, field)
                if kind == "text" and isinstance(part.get("text"), str):
                    parts.append(part["text"])
                elif kind == "image":
                    path, grid, text = _image(part.get("path"), base_dir, spec, where, f"{field}.path")
                    refs.append((path, grid))
                    parts.append(text)
                elif kind == "video" and spec.media_family == "nemotron-omni":
                    raise BadRow(
                        where, field, "is a video part, which packwise does not encode for media_family "
                        "'nemotron-omni' (images and audio only)",
                        "drop the video, or pack for media_family 'qwen2.5-vl'",
                    )  # fmt: skip
                elif kind == "video" and isinstance(part, dict):
                    ref, text = _video(part, base_dir, spec, where, field)
                    refs.append(ref)
                    parts.append(text)
                elif kind == "audio" and tokenizer is None:
                    raise BadRow(
                        where, field, "is an audio part but the tokenizer has no special tokens at the audio ids "
                        f"{AudioSpec().audio_token_id}-{AudioSpec().audio_end_token_id} (<|AUDIO|>, <|audio_bos|>, "
                        "<|audio_eos|>)", "use --tokenizer qwen2.5 or a Qwen2.5-Omni tokenizer",
                    )  # fmt: skip
                elif kind == "audio":
                    path, frames, text = _audio(part.get("path"), base_dir, spec, audio or AudioSpec(), tokenizer,
                                                where, f"{field}.path")  # fmt: skip
                    refs.append((path, frames))
                    parts.append(text)
                else:
                    raise BadRow(
                        where,
                        field,
                        f"= {part!r} is not a text part {{type: text, text}}, an image part {{type: image, path}} "
                        "a video part {type: video, path | frames} or an audio part {type: audio, path}",
                    )
            content = "".join(parts)
        elif images is not None and PLACEHOLDER in content:
            pieces = content.split(PLACEHOLDER)
            placeholders += len(pieces) - 1
            text = pieces[0]
            for piece in pieces[1:]:
                if not queue:
                    break
                k = len(images) - len(queue)
                path, grid, expanded = _image(queue.pop(0), base_dir, spec, where, f"images[{k}]")
                refs.append((path, grid))
                text += expanded + piece
            content = text
        out.append({**m, "content": content})
    if images is not None and placeholders != len(images):
        raise BadRow(
            where, "images",
            f"has {len(images)} entries but the messages hold {placeholders} {PLACEHOLDER} placeholders; "
            "use one placeholder per image",
        )  # fmt: skip
    return out, refs
