"""The flat samples every pipeline step passes on, and the row-error policy (shared by ``_samples`` and
``_tokens``, which import this module and never each other)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..files import BadRow, RawInput


@dataclass
class Samples:
    """Tokenized samples, flat. ``N`` sequences, ``T`` tokens.

    Attributes:
        ids: ``(T,)`` int32 token ids.
        labels: ``(T,)`` int32 HF labels (unshifted; -100 = no loss).
        offsets: ``(N+1,)`` int64; sequence ``i`` is ``ids[offsets[i]:offsets[i+1]]``.
        source: ``(N,)`` int64 input row of each sequence.
        columns: other per-token columns, each ``(T,)``.
        media: per sequence, its images ``[(path, (t, h, w)), ...]`` in text order, paths relative to the
            vision media root when one is set, else absolute (None when
            the data has no images).
        media_root: the absolute folder ``media`` paths are relative to (None: paths as given).
        pad_tokens_removed: padding tokens (``attention_mask == 0``) stripped from pre-tokenized rows on read.
        field_values_dropped: values of ``drop_fields`` removed from the rows before they were read.
    """

    ids: np.ndarray
    labels: np.ndarray
    offsets: np.ndarray
    source: np.ndarray
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    media: list | None = None
    media_root: str | None = None
    pad_tokens_removed: int = 0
    field_values_dropped: int = 0

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def num_sequences(self) -> int:
        return int(self.source.shape[0])

    @property
    def num_tokens(self) -> int:
        return int(self.ids.shape[0])

    @classmethod
    def from_arrays(cls, per_sample: list[tuple[np.ndarray, np.ndarray]], source: list[int], columns=None) -> Samples:
        lengths = np.fromiter((ids.shape[0] for ids, _ in per_sample), dtype=np.int64, count=len(per_sample))
        offsets = np.zeros(len(per_sample) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if per_sample:
            ids = np.concatenate([a for a, _ in per_sample]).astype(np.int32, copy=False)
            labels = np.concatenate([b for _, b in per_sample]).astype(np.int32, copy=False)
        else:
            ids = labels = np.zeros(0, dtype=np.int32)
        return cls(ids, labels, offsets, np.asarray(source, dtype=np.int64), columns or {})


class RowErrors:
    """Raise on the first bad row, or count and keep the first few messages with ``skip``."""

    def __init__(self, skip: bool, raw: RawInput) -> None:
        self.skip = skip
        self.rows: list[tuple[int, str]] = list(raw.errors)

    def bad(self, row: int, error: BadRow) -> None:
        if not self.skip:
            raise error
        self.rows.append((row, str(error)))
