"""Overflow policy for sequences longer than the capacity: truncate, split, drop or error.

Lengths are recomputed after the policy, before planning, so the planner never sees a stale length.
Every truncated, split or dropped token and sample is counted (and loss-carrying tokens separately).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
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


def apply_overflow(
    samples: Samples, capacity: int, policy: Overflow, locate: Callable[[int], str], vision=None
) -> tuple[Samples, OverflowCounts]:
    """Make every sequence fit ``capacity`` tokens.

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
    """
    if policy not in OVERFLOW_POLICIES:
        raise ValueError(f"unknown overflow policy {policy!r}; use one of {', '.join(OVERFLOW_POLICIES)}")
    if samples.media is not None:
        from ..multimodal import VisionSpec
        from ._media import overflow_with_media

        out, counts = overflow_with_media(samples, capacity, policy, locate, vision or VisionSpec())
        return out, OverflowCounts(**counts)
    lengths = samples.lengths
    over = lengths > capacity
    if not over.any():
        return samples, OverflowCounts()
    if policy == "error":
        i = int(np.flatnonzero(over)[0])
        raise ValueError(
            f"{locate(int(samples.source[i]))}: sequence has {int(lengths[i])} tokens > capacity {capacity}; "
            "pass --overflow truncate|split|drop (overflow=...) or raise --capacity"
        )
    loss = samples.labels != IGNORE_INDEX
    if policy == "split":
        pieces = (lengths + capacity - 1) // capacity
        seq = np.repeat(np.arange(lengths.shape[0]), pieces)
        k = np.arange(seq.shape[0]) - np.repeat(np.cumsum(pieces) - pieces, pieces)
        piece_len = np.minimum(capacity, lengths[seq] - k * capacity)
        offsets = np.zeros(piece_len.shape[0] + 1, dtype=np.int64)
        np.cumsum(piece_len, out=offsets[1:])
        out = Samples(samples.ids, samples.labels, offsets, samples.source[seq], samples.columns)
        counts = OverflowCounts(samples_split=int(over.sum()), pieces_added=int((pieces - 1).sum()))
        return out, counts
    starts = np.repeat(samples.offsets[:-1], lengths)
    if policy == "truncate":
        keep = np.arange(samples.num_tokens) - starts < capacity
        new_lengths = np.minimum(lengths, capacity)
        source = samples.source
    else:
        keep = np.repeat(~over, lengths)
        new_lengths = lengths[~over]
        source = samples.source[~over]
    offsets = np.zeros(new_lengths.shape[0] + 1, dtype=np.int64)
    np.cumsum(new_lengths, out=offsets[1:])
    out = Samples(
        samples.ids[keep], samples.labels[keep], offsets, source, {k: v[keep] for k, v in samples.columns.items()}
    )
    removed = int((~keep).sum())
    removed_loss = int((loss & ~keep).sum())
    if policy == "truncate":
        counts = OverflowCounts(
            samples_truncated=int(over.sum()), tokens_truncated=removed, loss_tokens_truncated=removed_loss
        )
    else:
        counts = OverflowCounts(
            samples_dropped=int(over.sum()), tokens_dropped=removed, loss_tokens_dropped=removed_loss
        )
    return out, counts
