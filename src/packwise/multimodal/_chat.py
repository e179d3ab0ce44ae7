"""Multimodal chats: image parts (or LLaVA-style ``<image>`` placeholders) become Qwen2.5 vision tokens.

A message's ``content`` may be a list of parts ``{"type": "text", "text": ...}`` and
``{"type": "image", "path": ...}``; or a row may carry ``"images": [path, ...]`` with one ``<image>``
placeholder per image in the message text. Each image becomes ``<|vision_start|>`` + ``n × <|image_pad|>`` +
``<|vision_end|>`` with ``n = t·h·w / merge²`` from its size, before the chat template is applied, so
any template that renders string content works and the planner sees the true length.
"""

from __future__ import annotations

from pathlib import Path

from ..io._read import BadRow
from ._images import VisionSpec, image_grid, load_image

PLACEHOLDER = "<image>"
VISION_START, IMAGE_PAD, VISION_END = "<|vision_start|>", "<|image_pad|>", "<|vision_end|>"


def is_multimodal(row: dict, key: str = "messages") -> bool:
    """True when a row has image parts or an ``images`` list."""
    if row.get("images") is not None:
        return True
    msgs = row.get(key)
    return isinstance(msgs, list) and any(isinstance(m, dict) and isinstance(m.get("content"), list) for m in msgs)


def _image(
    path, base_dir: Path | None, spec: VisionSpec, where: str, field: str
) -> tuple[str, tuple[int, int, int], str]:
    from ..pipeline._media import resolve_media_path

    root = spec.media_root if spec.media_root is not None else base_dir  # base_dir: the input's folder
    full = resolve_media_path(path, base=base_dir, media_root=root, where=where, field=field, kind="image")
    try:
        grid = image_grid(load_image(full, where), spec)
    except ValueError as e:
        raise BadRow(where, field, f"names image {full}, which cannot be read ({e.__cause__ or e})") from e
    text = VISION_START + IMAGE_PAD * spec.tokens(grid) + VISION_END
    if spec.media_root is not None:  # recorded relative to the media root (metadata.json names the root)
        return full.relative_to(Path(spec.media_root).resolve()).as_posix(), grid, text
    return str(full), grid, text


def expand_images(row: dict, key: str, *, base_dir: Path | None, spec: VisionSpec, where: str):
    """``(messages with string content, [(absolute path, (t, h, w)), ...])`` in text order.

    Raises:
        BadRow: a malformed part, a missing or unreadable image, or ``<image>`` placeholders whose count
            differs from ``images``.
    """
    images = row.get("images")
    if images is not None and not isinstance(images, list):
        raise BadRow(where, "images", f"is a {type(images).__name__}, expected a list of image paths")
    queue = list(images or [])
    placeholders = 0
    refs, out = [], []
    for j, m in enumerate(row[key]):
        content = m["content"]
        if isinstance(content, list):
            parts = []
            for q, part in enumerate(content):
                field = f"{key}[{j}].content[{q}]"
                kind = part.get("type") if isinstance(part, dict) else None
                if kind == "text" and isinstance(part.get("text"), str):
                    parts.append(part["text"])
                elif kind == "image":
                    path, grid, text = _image(part.get("path"), base_dir, spec, where, f"{field}.path")
                    refs.append((path, grid))
                    parts.append(text)
                else:
                    raise BadRow(
                        where,
                        field,
                        f"= {part!r} is not a text part {{type: text, text}} or an image part {{type: image, path}}",
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
