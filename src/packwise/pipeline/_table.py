"""Execute a plan into Arrow: one row per pack, every per-token column gathered by the same index.

Output schema (one row per pack; ``T_p`` tokens and ``N_p`` sequences in pack ``p``):

- ``input_ids``: ``list<int32>`` (T_p), sequences concatenated in plan order;
- ``labels``: ``list<int32>`` (T_p), HF convention (unshifted, -100 = no loss); the first label of every
  sequence is -100, so no target crosses a sequence boundary;
- ``seq_lengths``: ``list<int32>`` (N_p), tokens per sequence; sums to T_p;
- ``source_index``: ``list<int64>`` (N_p), input row of each sequence;
- every other per-token column of the input: ``list<dtype>`` (T_p), gathered like ``input_ids``
  (``mm_token_type_ids``: 0 text, 1 image, for data with images); a column shaped ``(T, k, ...)`` (teacher
  top-k log-probs, ...) is ``list<fixed_size_list<dtype, k>>`` (``packwise.files._token_cells``);
- with images: ``image_paths`` ``list<string>``, ``image_sha256`` ``list<string>`` (SHA-256 of each file's
  bytes, checked when the images are loaded again) and ``image_grid_thw``
  ``list<fixed_size_list<int32, 3>>`` (per image, in pack order) and ``images_per_sequence`` ``list<int32>`` (N_p).

No padding is stored: packs are variable-length rows of at most the capacity.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..files import token_lists
from ..plan import PackPlan, gather_index, mask_boundaries  # the numpy seam every executor of a plan builds on
from ._media import media_arrays, media_columns
from ._samples import Samples


@dataclass
class PackedColumns:
    """Flat packed arrays plus pack boundaries; slice into Arrow tables shard by shard.

    Built on the numpy seam of ``plan._flat``: one gather index (:func:`~packwise.plan._flat.gather_index`)
    for every per-token column, the boundary-label rule from :func:`~packwise.plan._flat.mask_boundaries`."""

    ids: np.ndarray
    labels: np.ndarray
    columns: dict[str, np.ndarray]
    token_offsets: np.ndarray  # (P+1,) int64
    seq_lengths: np.ndarray  # (N,) int32 in pack order
    seq_offsets: np.ndarray  # (P+1,) int64
    source: np.ndarray  # (N,) int64 in pack order
    loss_tokens_masked_at_boundary: int
    media: dict | None = None  # see _media.media_arrays

    @property
    def num_packs(self) -> int:
        return int(self.seq_offsets.shape[0] - 1)

    @classmethod
    def build(cls, samples: Samples, plan: PackPlan) -> PackedColumns:
        order = plan.order
        idx, cu_seqlens = gather_index(samples.offsets, order)
        lens = np.diff(cu_seqlens)
        labels = samples.labels[idx]
        masked = mask_boundaries(labels, cu_seqlens[:-1], lens, count=True)
        pack_tokens = plan.pack_lengths()
        token_offsets = np.zeros(pack_tokens.shape[0] + 1, dtype=np.int64)
        np.cumsum(pack_tokens, out=token_offsets[1:])
        return cls(
            ids=samples.ids[idx],
            labels=labels,
            columns={k: v[idx] for k, v in samples.columns.items()},
            token_offsets=token_offsets,
            seq_lengths=lens.astype(np.int32),
            seq_offsets=plan.offsets,
            source=samples.source[order],
            loss_tokens_masked_at_boundary=masked,
            media=(
                media_arrays(samples.media, order, plan.offsets, media_root=samples.media_root)
                if samples.media is not None
                else None
            ),
        )

    def table(self, start: int = 0, stop: int | None = None) -> pa.Table:
        """Packs ``start .. stop-1`` as an Arrow table (list offsets rebased to 0)."""
        stop = self.num_packs if stop is None else stop
        t0, t1 = int(self.token_offsets[start]), int(self.token_offsets[stop])
        s0, s1 = int(self.seq_offsets[start]), int(self.seq_offsets[stop])
        tok_off = self.token_offsets[start : stop + 1] - t0
        seq_off = self.seq_offsets[start : stop + 1] - s0
        data = {
            "input_ids": _lists(tok_off, self.ids[t0:t1]),
            "labels": _lists(tok_off, self.labels[t0:t1]),
            "seq_lengths": _lists(seq_off, self.seq_lengths[s0:s1]),
            "source_index": _lists(seq_off, self.source[s0:s1]),
        }
        for name, values in self.columns.items():
            data[name] = token_lists(tok_off, values[t0:t1])
        if self.media is not None:
            data.update(media_columns(self.media, start, stop, seq_off, s0, s1))
        return pa.table(data)


def _lists(offsets: np.ndarray, values: np.ndarray) -> pa.Array:
    if offsets[-1] < 2**31 - 1:
        return pa.ListArray.from_arrays(_arrow(offsets.astype(np.int32)), _arrow(values))
    return pa.LargeListArray.from_arrays(_arrow(offsets), _arrow(values))


def _arrow(values: np.ndarray) -> pa.Array:
    """A numeric numpy array as an Arrow array over the same buffer (``pa.array`` would import pandas: ~1 s
    of ``packwise pack``'s start-up)."""
    if values.dtype.kind in "iuf" and values.dtype.byteorder in "=|":
        values = np.ascontiguousarray(values)
        return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), values.shape[0], [None, pa.py_buffer(values)])
    return pa.array(values)
