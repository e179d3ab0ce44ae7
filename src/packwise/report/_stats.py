"""Per-pack figures read back from a packed dataset's Parquet shards (only the ``seq_lengths`` column)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: Most bins of the sequence-length histogram and of the pack-fill histogram.
LENGTH_BINS = 64
FILL_BINS = 40


@dataclass(frozen=True)
class PackStats:
    """What the plots need from the written packs, in tokens.

    Attributes:
        seq_lengths: ``(N,)`` int64, tokens per packed sequence, in pack order.
        pack_tokens: ``(P,)`` int64, tokens per pack (sum of its ``seq_lengths``).
        pack_sequences: ``(P,)`` int64, sequences per pack.
    """

    seq_lengths: np.ndarray
    pack_tokens: np.ndarray
    pack_sequences: np.ndarray

    @classmethod
    def from_lists(cls, seq_lengths: list[list[int]]) -> PackStats:
        """From one list of sequence lengths per pack.

        Example:
            >>> s = PackStats.from_lists([[7, 1], [6, 2], [5]])
            >>> s.pack_tokens.tolist(), s.pack_sequences.tolist(), s.seq_lengths.tolist()
            ([8, 8, 5], [2, 2, 1], [7, 1, 6, 2, 5])
        """
        counts = np.asarray([len(p) for p in seq_lengths], dtype=np.int64)
        flat = np.asarray([x for p in seq_lengths for x in p], dtype=np.int64)
        return cls(seq_lengths=flat, pack_tokens=_pack_sums(flat, counts), pack_sequences=counts)


def _pack_sums(flat: np.ndarray, counts: np.ndarray) -> np.ndarray:
    if not counts.shape[0]:
        return np.zeros(0, dtype=np.int64)
    if (counts == 0).any():
        raise ValueError("a pack holds no sequence (empty seq_lengths); the dataset was not written by packwise pack")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    return np.add.reduceat(flat, starts).astype(np.int64)


def read_pack_stats(path) -> PackStats:
    """Read ``seq_lengths`` of every pack of a ``packwise pack`` output directory.

    Raises:
        ValueError: ``path`` is not a packwise packed dataset, or a shard has no ``seq_lengths`` column.
    """
    import pyarrow.parquet as pq

    from ..files import packed_files

    flats, counts = [], []
    for f in packed_files(path):
        names = pq.read_schema(f).names
        if "seq_lengths" not in names:
            raise ValueError(f"{f} has no seq_lengths column (columns: {names}); re-write it with `packwise pack`")
        with pq.ParquetFile(f) as pf:  # not pq.read_table: it imports pyarrow.dataset (and pandas), ~1.5 s
            column = pf.read(columns=["seq_lengths"]).column("seq_lengths")
        for chunk in column.chunks:
            if chunk.null_count or chunk.flatten().null_count:
                raise ValueError(f"{f}: seq_lengths holds nulls; re-write it with `packwise pack`")
            flats.append(_ints(chunk.flatten(), f))
            counts.append(np.diff(_ints(chunk.offsets, f)))
    flat = np.concatenate(flats) if flats else np.zeros(0, dtype=np.int64)
    count = np.concatenate(counts) if counts else np.zeros(0, dtype=np.int64)
    return PackStats(seq_lengths=flat, pack_tokens=_pack_sums(flat, count), pack_sequences=count)


def _ints(arr, source) -> np.ndarray:
    """A null-free integer pyarrow Array as int64, read from its data buffer (``Array.to_numpy`` imports
    pandas: about 1.5 s of a report's cost, issue 29)."""
    import pyarrow as pa

    if not pa.types.is_integer(arr.type):
        raise ValueError(f"{source}: seq_lengths holds {arr.type}, not integers; re-write it with `packwise pack`")
    dtype = np.dtype(f"{'i' if pa.types.is_signed_integer(arr.type) else 'u'}{arr.type.bit_width // 8}")
    data = arr.buffers()[1]
    if data is None or not len(arr):
        return np.zeros(0, dtype=np.int64)
    return np.frombuffer(data, dtype=dtype, count=len(arr), offset=arr.offset * dtype.itemsize).astype(np.int64)


def check_stats(stats: PackStats, report, path) -> None:
    """Raise if the shards disagree with the report (the directory was changed after ``packwise pack``).

    Raises:
        ValueError: packs, sequences or tokens differ; the message names both counts and the fix.
    """
    found = {
        "packs": int(stats.pack_tokens.shape[0]),
        "sequences_packed": int(stats.seq_lengths.shape[0]),
        "tokens_packed": int(stats.seq_lengths.sum()),
    }
    for key, value in found.items():
        if getattr(report, key) != value:
            raise ValueError(
                f"{Path(path)}: the report says {key} = {getattr(report, key)} but the Parquet shards hold {value}; "
                "the directory was modified after `packwise pack` — re-run `packwise pack` to rebuild it"
            )
    over = int((stats.seq_lengths > report.capacity).sum()) + int((stats.pack_tokens > report.capacity).sum())
    if over:
        raise ValueError(
            f"{Path(path)}: {over} sequences or packs exceed capacity {report.capacity} tokens; "
            "the directory was modified after `packwise pack` — re-run `packwise pack` to rebuild it"
        )


def histogram(values: np.ndarray, capacity: int, max_bins: int) -> tuple[list[int], list[int]]:
    """Integer-aligned histogram of token counts in ``[1, capacity]``.

    Bins are ``(edges[i], edges[i+1]]`` tokens, all of the same width ``ceil(capacity / max_bins)``, so a
    count equal to ``capacity`` falls in the last bin.

    Returns:
        ``(edges, counts)`` as plain lists (``len(edges) == len(counts) + 1``).

    Raises:
        ValueError: ``capacity`` or ``max_bins`` < 1.

    Example:
        >>> histogram(np.array([1, 2, 2, 8]), 8, 4)
        ([0, 2, 4, 6, 8], [3, 0, 0, 1])
    """
    if capacity < 1 or max_bins < 1:
        raise ValueError(f"capacity and max_bins must be >= 1, got {capacity} and {max_bins}")
    width = math.ceil(capacity / max_bins)
    n_bins = math.ceil(capacity / width)
    edges = np.arange(n_bins + 1, dtype=np.int64) * width
    counts, _ = np.histogram(values, bins=edges + 0.5) if values.shape[0] else (np.zeros(n_bins, np.int64), None)
    return edges.tolist(), [int(c) for c in counts]
