"""Images in the offline pipeline: token/image consistency, image-safe overflow, and the Parquet columns.

Invariant kept everywhere: a sequence's ``<|image_pad|>`` tokens are exactly ``Σ t·h·w / merge²`` over its
images, in order. Overflow never cuts inside an image's ``<|vision_start|> … <|vision_end|>`` block: it
truncates before the block (the image and its tokens go together, counted) or drops the sample.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..constants import IGNORE_INDEX
from ..io._read import BadRow
from ..multimodal import VisionSpec

MM_COLUMN = "mm_token_type_ids"


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


def resolve_media_path(
    path, *, base: Path | str | None, media_root: Path | str | None, where: str, field: str, kind: str = "media file"
) -> Path:
    """The absolute path of a media file (image, audio, video) named in a row, refused outside ``media_root``.

    Relative paths are relative to ``base`` (the input file's folder; None: the working directory). The
    resolved path — symbolic links followed, so a link inside the root that points outside is refused too —
    must lie inside ``media_root`` (None: no bound, for in-memory rows). Every media kind calls this function.

    Raises:
        BadRow: the path is not a non-empty string, leaves the media root, or does not exist — naming the
            row, the field, the path and the fix (``--media-root`` / ``media_root=`` widens the root).

    Example:
        >>> import tempfile, pathlib
        >>> root = pathlib.Path(tempfile.mkdtemp()).resolve()
        >>> _ = (root / "a.png").write_bytes(b"")
        >>> resolve_media_path("a.png", base=root, media_root=root, where="row 0", field="images[0]") == root / "a.png"
        True
        >>> resolve_media_path("../x.png", base=root, media_root=root, where="row 0", field="images[0]")
        Traceback (most recent call last):
        ...
        packwise.io._read.BadRow: row 0: field 'images[0]' names media file ..., outside the media root ...
    """
    if not isinstance(path, str) or not path:
        raise BadRow(where, field, f"has a {kind} path {path!r}; expected a non-empty string")
    full = Path(path)
    full = (full if full.is_absolute() else Path(base or Path.cwd()) / full).resolve()
    if media_root is not None:
        root = Path(media_root).resolve()
        if full != root and root not in full.parents:
            raise BadRow(
                where, field,
                f"names {kind} {full}, outside the media root {root}; media files must be inside it",
                "move the file there or pass --media-root (media_root=) a folder that contains it",
            )  # fmt: skip
    if not full.is_file():
        raise BadRow(
            where, field, f"names {kind} {full}, which does not exist (relative paths are relative to the input file)"
        )
    return full


def media_token_types(ids: np.ndarray, refs: list, spec: VisionSpec, where: str) -> np.ndarray:
    """``(L,)`` int8 ``mm_token_type_ids`` (0 text, 1 image) after checking the count against the images.

    Raises:
        BadRow: the number of ``<|image_pad|>`` tokens differs from what the images need (e.g. a literal
            vision token typed in the text).
    """
    is_image = ids == spec.image_token_id
    need = sum(spec.tokens(g) for _, g in refs)
    if int(is_image.sum()) != need:
        raise BadRow(
            where, "messages", f"holds {int(is_image.sum())} <|image_pad|> tokens but its {len(refs)} image(s) need "
            f"{need}; remove literal vision tokens from the text or fix the image list",
        )  # fmt: skip
    for token, name in ((spec.vision_start_token_id, "<|vision_start|>"), (spec.vision_end_token_id, "<|vision_end|>")):
        count = int((ids == token).sum())
        if count != len(refs):
            raise BadRow(
                where, "messages",
                f"holds {count} {name} tokens for {len(refs)} image(s); remove literal vision tokens from the text",
            )  # fmt: skip
    return is_image.astype(np.int8)


def _blocks(ids: np.ndarray, spec: VisionSpec) -> list[tuple[int, int]]:
    starts = np.flatnonzero(ids == spec.vision_start_token_id).tolist()
    ends = np.flatnonzero(ids == spec.vision_end_token_id).tolist()
    return list(zip(starts, ends))


def _cut(blocks: list[tuple[int, int]], start: int, end: int) -> int:
    """Move a cut at ``end`` back before an image block it would split."""
    for s, e in blocks:
        if s < end <= e and s >= start:
            return s
    return end


def overflow_with_media(samples, capacity: int, policy: str, locate, spec: VisionSpec):
    """:func:`apply_overflow` for datasets with images (per sequence; only long sequences do any work).

    Returns ``(samples, counts)`` with ``counts`` a dict of the OverflowCounts fields plus ``images_dropped``.
    """
    lengths = samples.lengths
    counts = dict.fromkeys(
        ("samples_truncated", "tokens_truncated", "loss_tokens_truncated", "samples_split", "pieces_added",
         "samples_dropped", "tokens_dropped", "loss_tokens_dropped", "images_dropped"), 0,
    )  # fmt: skip
    if not (lengths > capacity).any():
        return samples, counts
    if policy == "error":
        i = int(np.flatnonzero(lengths > capacity)[0])
        raise ValueError(
            f"{locate(int(samples.source[i]))}: sequence has {int(lengths[i])} tokens > capacity {capacity}; "
            "pass --overflow truncate|split|drop (overflow=...) or raise --capacity"
        )
    pieces: list[tuple[int, int, int]] = []  # (sequence, start, end) in token coordinates of the sequence
    media: list[list] = []
    sources: list[int] = []
    for i, n in enumerate(lengths.tolist()):
        a = int(samples.offsets[i])
        refs = samples.media[i]
        if n <= capacity:
            pieces.append((i, 0, n))
            media.append(refs)
            sources.append(int(samples.source[i]))
            continue
        ids = samples.ids[a : a + n]
        loss = samples.labels[a : a + n] != IGNORE_INDEX
        blocks = _blocks(ids, spec)
        if policy == "drop":
            counts["samples_dropped"] += 1
            counts["tokens_dropped"] += n
            counts["loss_tokens_dropped"] += int(loss.sum())
            counts["images_dropped"] += len(refs)
            continue
        cuts, start = [], 0
        while start < n:
            end = min(start + capacity, n)
            end = _cut(blocks, start, end) if end < n else end
            if end == start or (policy == "truncate" and start > 0):
                break
            cuts.append((start, end))
            start = end
        kept = cuts[-1][1] if cuts else 0
        if (policy == "split" and kept < n) or not cuts:  # an image block longer than the capacity
            counts["samples_dropped"] += 1
            counts["tokens_dropped"] += n
            counts["loss_tokens_dropped"] += int(loss.sum())
            counts["images_dropped"] += len(refs)
            continue
        if policy == "truncate":
            counts["samples_truncated"] += 1
            counts["tokens_truncated"] += n - kept
            counts["loss_tokens_truncated"] += int(loss[kept:].sum())
        else:
            counts["samples_split"] += 1
            counts["pieces_added"] += len(cuts) - 1
        image = 0
        for s, e in cuts:
            inside = [b for b in blocks if s <= b[0] and b[1] < e]
            pieces.append((i, s, e))
            media.append(refs[image : image + len(inside)])
            sources.append(int(samples.source[i]))
            image += len(inside)
        counts["images_dropped"] += len(refs) - image
    starts = np.asarray([int(samples.offsets[i]) + s for i, s, _ in pieces], dtype=np.int64)
    lens = np.asarray([e - s for _, s, e in pieces], dtype=np.int64)
    idx = np.repeat(starts - (np.cumsum(lens) - lens), lens) + np.arange(int(lens.sum()))
    offsets = np.zeros(lens.shape[0] + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    out = replace(
        samples, ids=samples.ids[idx], labels=samples.labels[idx], offsets=offsets,
        source=np.asarray(sources, dtype=np.int64), columns={k: v[idx] for k, v in samples.columns.items()},
        media=media,
    )  # fmt: skip
    return out, counts


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
) -> dict[str, np.ndarray]:
    """Flat per-image paths (as recorded: relative to ``media_root``), content hashes and grids in pack order,
    plus images per sequence (for table slicing)."""
    per_seq = np.asarray([len(media[i]) for i in order.tolist()], dtype=np.int32)
    paths = [p for i in order.tolist() for p, _ in media[i]]
    root = Path(media_root) if media_root else None
    digests = {p: image_digest(root / p if root else p) for p in dict.fromkeys(paths)}
    grids = np.asarray([g for i in order.tolist() for _, g in media[i]], dtype=np.int32).reshape(-1, 3)
    seq_image_offsets = np.zeros(per_seq.shape[0] + 1, dtype=np.int64)
    np.cumsum(per_seq, out=seq_image_offsets[1:])
    pack_image_offsets = seq_image_offsets[seq_offsets]
    return {
        "per_seq": per_seq,
        "paths": np.asarray(paths, dtype=object),
        "sha256": np.asarray([digests[p] for p in paths], dtype=object),
        "grids": grids,
        "pack_offsets": pack_image_offsets,
    }


def media_columns(arrays: dict, start: int, stop: int, seq_off: np.ndarray, s0: int, s1: int) -> dict[str, pa.Array]:
    """``image_paths`` list<string>, ``image_sha256`` list<string>, ``image_grid_thw`` list<list<int32>>,
    ``images_per_sequence`` list<int32>."""
    i0, i1 = int(arrays["pack_offsets"][start]), int(arrays["pack_offsets"][stop])
    img_off = (arrays["pack_offsets"][start : stop + 1] - i0).astype(np.int32)
    grids = pa.FixedSizeListArray.from_arrays(pa.array(arrays["grids"][i0:i1].reshape(-1)), 3)
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
