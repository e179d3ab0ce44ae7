"""Overflow policy for sequences longer than the capacity: truncate, split, drop or error.

:func:`cut_points` is the one place that decides where an over-long sample is cut (numpy-free, one sample):
the offline pipeline (:func:`apply_overflow`, with and without media), ``PackingStream`` and the Energon mixin
all call it and keep only their own data handling (CSR arrays, mappings, Energon fields) and error text.
Lengths are recomputed after the policy, before planning, so the planner never sees a stale length.
Every truncated, split or dropped token and sample is counted (and loss-carrying tokens separately).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Literal, get_args

import numpy as np

from ..constants import IGNORE_INDEX
from ._samples import Samples

Overflow = Literal["truncate", "split", "drop", "error"]
OVERFLOW_POLICIES: tuple[str, ...] = get_args(Overflow)
#: Media dropped with the tokens around them (reported under ``PackReport.multimodal``).
MEDIA_DROPS = ("images_dropped", "audio_dropped", "videos_dropped")


@dataclass(frozen=True)
class OverflowCounts:
    """What the overflow policy changed, in samples and tokens."""

    samples_truncated: int = 0
    tokens_truncated: int = 0
    loss_tokens_truncated: int = 0
    samples_split: int = 0
    pieces_added: int = 0
    samples_dropped: int = 0
    tokens_dropped: int = 0
    loss_tokens_dropped: int = 0
    images_dropped: int = 0
    audio_dropped: int = 0
    videos_dropped: int = 0

    def __add__(self, other: OverflowCounts) -> OverflowCounts:
        """The counts of two parts of one input together (the Ray engine sums its pieces')."""
        return OverflowCounts(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    def token_counts(self) -> dict[str, int]:
        """The :class:`PackReport` fields among these (media drops are reported under ``multimodal``)."""
        return {k: v for k, v in asdict(self).items() if k not in MEDIA_DROPS}


def cut_points(
    length: int, limit: int, policy: Overflow, *, spans: Iterable[Sequence[int | str]] = ()
) -> list[tuple[int, int]]:
    """The slices ``[(start, end), ...]`` (end exclusive) of a sample of ``length`` tokens that ``policy`` keeps.

    A sample that fits (``length <= limit``) is kept whole: ``[(0, length)]``, whatever the policy. Otherwise
    every slice holds at most ``limit`` tokens and no cut falls strictly inside a span of ``spans`` (items
    ``(start, end, ...)``: an image, video or audio block; extra items such as a kind are ignored) — a cut
    that would is moved back to the span's start:

    - ``truncate``: the first slice only (the tokens after it are truncated);
    - ``split``: consecutive slices covering every token (each becomes its own sequence);
    - ``drop``: ``[]``;
    - ``[]`` too when a span longer than ``limit`` blocks a cut (truncate: the first one; split: any one) —
      the caller drops the whole sample and counts it.

    The caller counts what is removed: ``length - Σ (end - start)`` tokens, and the spans not wholly inside a
    kept slice.

    Raises:
        ValueError: ``policy`` is unknown, ``limit < 1``, or ``policy="error"`` and ``length > limit`` (callers
            raise their own message, naming the sample, first).

    Example:
        >>> cut_points(10, 4, "split")
        [(0, 4), (4, 8), (8, 10)]
        >>> cut_points(10, 4, "split", spans=[(3, 6, "image")])
        [(0, 3), (3, 7), (7, 10)]
        >>> cut_points(10, 4, "truncate", spans=[(3, 6)]), cut_points(10, 3, "truncate", spans=[(0, 6)])
        ([(0, 3)], [])
    """
    if policy not in OVERFLOW_POLICIES:
        raise ValueError(f"unknown overflow policy {policy!r}; use one of {', '.join(OVERFLOW_POLICIES)}")
    if limit < 1:
        raise ValueError(f"overflow limit is {limit} tokens; it must be at least 1 (raise the capacity)")
    if length <= limit:
        return [(0, length)]
    if policy == "error":
        raise ValueError(f"sample has {length} tokens > limit {limit}; use overflow truncate|split|drop or raise it")
    if policy == "drop":
        return []
    blocks = sorted((int(s[0]), int(s[1])) for s in spans)
    cuts, start = [], 0
    while start < length:
        end = min(start + limit, length)
        if end < length:
            for s, e in blocks:
                if s < end < e and s >= start:
                    end = s
                    break
        if end <= start:  # a span longer than the limit: the sample cannot be cut
            return []
        cuts.append((start, end))
        start = end
        if policy == "truncate":
            break
    return cuts


def apply_overflow(
    samples: Samples, capacity: int, policy: Overflow, locate: Callable[[int], str], vision=None
) -> tuple[Samples, OverflowCounts]:
    """Make every sequence fit ``capacity`` tokens, cutting where :func:`cut_points` says.

    - ``truncate``: keep the first ``capacity`` tokens (and the same slice of every per-token column);
    - ``split``: cut into pieces of at most ``capacity`` tokens, each its own sequence, no token lost
      (121 tokens at capacity 60 -> 60 + 60 + 1);
    - ``drop``: remove the sample;
    - ``error``: raise, naming the row, its length and the fix.

    With images (``samples.media``), a cut never falls inside an image: truncation moves before the image
    (the image is dropped with its tokens, counted) and a sample that cannot be split without cutting an
    image is dropped (counted).

    Raises:
        ValueError: ``policy`` is unknown, or ``policy="error"`` and a sample is too long.

    Example:
        >>> import numpy as np
        >>> ids = np.arange(7, dtype=np.int32)
        >>> s = Samples(ids, ids, np.array([0, 5, 7]), np.array([0, 1]))
        >>> out, counts = apply_overflow(s, 3, "split", str)
        >>> out.offsets.tolist(), counts.samples_split, counts.pieces_added
        ([0, 3, 5, 7], 1, 1)
    """
    if policy not in OVERFLOW_POLICIES:
        raise ValueError(f"unknown overflow policy {policy!r}; use one of {', '.join(OVERFLOW_POLICIES)}")
    lengths = samples.lengths
    over = np.flatnonzero(lengths > capacity)
    if not over.size:
        return samples, OverflowCounts()
    if policy == "error":
        i = int(over[0])
        raise ValueError(
            f"{locate(int(samples.source[i]))}: sequence has {int(lengths[i])} tokens > capacity {capacity}; "
            "pass --overflow truncate|split|drop (overflow=...) or raise --capacity"
        )
    blocks_of = None
    if samples.media is not None:
        from ..multimodal import VisionSpec
        from ._media import media_blocks

        spec = vision or VisionSpec()
        blocks_of = lambda a, n: media_blocks(samples.ids[a : a + n], spec)  # noqa: E731
    cuts = {}
    for i in over.tolist():
        n, a = int(lengths[i]), int(samples.offsets[i])
        cuts[i] = cut_points(n, capacity, policy, spans=blocks_of(a, n) if blocks_of else ())
    return _cut_samples(samples, cuts, policy, blocks_of)


def _cut_samples(samples: Samples, cuts: dict[int, list], policy: str, blocks_of) -> tuple[Samples, OverflowCounts]:
    """``samples`` with sequence ``i`` replaced by its slices ``cuts[i]`` (the others whole), and the counts."""
    lengths, offsets = samples.lengths, samples.offsets
    per = np.ones(lengths.shape[0], dtype=np.int64)
    per[np.fromiter(cuts, np.int64, len(cuts))] = [len(c) for c in cuts.values()]
    seq = np.repeat(np.arange(lengths.shape[0]), per)
    first = (np.cumsum(per) - per).tolist()
    start, end = np.zeros(seq.shape[0], dtype=np.int64), lengths[seq].astype(np.int64)
    for i, pieces in cuts.items():
        for k, (s, e) in enumerate(pieces):
            start[first[i] + k], end[first[i] + k] = s, e
    lens = end - start
    new_offsets = np.zeros(lens.shape[0] + 1, dtype=np.int64)
    np.cumsum(lens, out=new_offsets[1:])
    loss = samples.labels != IGNORE_INDEX
    c = dict.fromkeys((f.name for f in fields(OverflowCounts)), 0)
    media = None if samples.media is None else list(samples.media)
    for i, pieces in cuts.items():
        n, a = int(lengths[i]), int(offsets[i])
        if not pieces:  # dropped, or a media block longer than the capacity
            c["samples_dropped"] += 1
            c["tokens_dropped"] += n
            c["loss_tokens_dropped"] += int(loss[a : a + n].sum())
        elif policy == "split":
            c["samples_split"] += 1
            c["pieces_added"] += len(pieces) - 1
        else:
            kept = pieces[0][1]
            c["samples_truncated"] += 1
            c["tokens_truncated"] += n - kept
            c["loss_tokens_truncated"] += int(loss[a + kept : a + n].sum())
        if media is not None:
            media[i] = _cut_media(media[i], pieces, blocks_of(a, n), c)
    if media is not None:  # one list of media per piece
        media = [piece for i, m in enumerate(media) for piece in (m if i in cuts else [m])]
    if int(new_offsets[-1]) == samples.num_tokens:  # nothing removed: the pieces tile the tokens in order
        ids, labels, columns = samples.ids, samples.labels, samples.columns
    else:
        idx = np.repeat(offsets[seq] + start - new_offsets[:-1], lens) + np.arange(int(new_offsets[-1]))
        ids, labels, columns = samples.ids[idx], samples.labels[idx], {k: v[idx] for k, v in samples.columns.items()}
    out = replace(samples, ids=ids, labels=labels, offsets=new_offsets, source=samples.source[seq], columns=columns)
    if media is not None:
        out.media = media
    return out, OverflowCounts(**c)


def _cut_media(refs: list, pieces: list, blocks: list, counts: dict) -> list[list]:
    """Each piece's media references (the blocks wholly inside it, in text order); the others are counted dropped."""
    from ._media import is_audio, is_video

    out, used = [], 0
    for s, e in pieces:
        inside = sum(1 for b, d in blocks if s <= b and d <= e)
        out.append(refs[used : used + inside])
        used += inside
    for ref in refs[used:]:
        kind = "audio" if is_audio(ref) else "videos" if is_video(ref) else "images"
        counts[f"{kind}_dropped"] += 1
    return out
