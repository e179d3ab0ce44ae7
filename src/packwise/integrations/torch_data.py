"""``PackedParquetDataset``: the output of ``packwise pack`` as a map-style torch Dataset of packs."""

from __future__ import annotations

import bisect
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import torch
from torch.utils.data import Dataset

from ..assemble import PackedSequence, assemble_pack
from ..io._write import packed_files, read_metadata

BASE_COLUMNS = ("input_ids", "labels", "seq_lengths", "source_index")


class PackedParquetDataset(Dataset):
    """Packs written by ``packwise pack``, one :class:`~packwise.assemble.PackedSequence` per item.

    Works with ``torch.utils.data.DataLoader`` (``num_workers > 0`` too: files are opened lazily in each
    worker) and ``collate_fn=packwise.assemble.collate_packs``. ``source_index`` comes back as per-sequence
    ``metadata``; every other list column is a per-token column.

    Args:
        path: a directory written by ``packwise pack``.
        alignment: per-sequence alignment applied at load time (e.g. ``alignment_multiple(cp=2)``).
        pad_to: pad every pack to this many tokens (fixed-width packs, e.g. the capacity for PP/CUDA graphs).
        pad_token_id: ``input_ids`` value on padding.

    Raises:
        ValueError: ``path`` is not a packwise packed dataset.

    Example:
        >>> import tempfile
        >>> from packwise.cli import main
        >>> d = tempfile.mkdtemp()
        >>> _ = open(f"{d}/in.jsonl", "w").write('{"input_ids": [1, 2, 3]}\\n{"input_ids": [4, 5]}\\n')
        >>> main(["pack", f"{d}/in.jsonl", "-o", f"{d}/out", "--capacity", "8", "-q"])
        0
        >>> ds = PackedParquetDataset(f"{d}/out")
        >>> len(ds), ds[0].input_ids.tolist(), ds[0].position_ids.tolist(), ds[0].metadata
        (1, [1, 2, 3, 4, 5], [0, 1, 2, 0, 1], {'source_index': [0, 1]})
    """

    def __init__(self, path, *, alignment: int = 1, pad_to: int | None = None, pad_token_id: int = 0) -> None:
        self.path = Path(path)
        self.metadata = read_metadata(self.path)
        self.files = [str(f) for f in packed_files(self.path)]
        counts = [s["packs"] for s in self.metadata["shards"]]
        self._starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64).tolist()
        self.alignment, self.pad_to, self.pad_token_id = alignment, pad_to, pad_token_id
        self._open: dict[int, pq.ParquetFile] = {}
        self._cache: tuple[int, int, int, object] | None = None  # (file, group start, group end, table)

    def __len__(self) -> int:
        return self._starts[-1]

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_open"], state["_cache"] = {}, None
        return state

    def _row(self, index: int):
        if not -len(self) <= index < len(self):
            raise IndexError(f"pack {index} out of range for {len(self)} packs")
        index %= len(self)
        f = bisect.bisect_right(self._starts, index) - 1
        local = index - self._starts[f]
        c = self._cache
        if c is None or c[0] != f or not c[1] <= local < c[2]:
            pf = self._open.get(f) or self._open.setdefault(f, pq.ParquetFile(self.files[f]))
            start = 0
            for g in range(pf.num_row_groups):
                n = pf.metadata.row_group(g).num_rows
                if local < start + n:
                    self._cache = c = (f, start, start + n, pf.read_row_group(g))
                    break
                start += n
        return c[3].slice(local - c[1], 1)

    def __getitem__(self, index: int) -> PackedSequence:
        row = self._row(index)
        lengths = row.column("seq_lengths")[0].values.to_numpy()
        cuts = np.cumsum(lengths)[:-1]
        columns = {
            name: np.split(np.array(row.column(name)[0].values.to_numpy(zero_copy_only=False)), cuts)
            for name in row.column_names
            if name not in ("seq_lengths", "source_index")
        }
        sources = row.column("source_index")[0].values.to_numpy().tolist()
        sequences = [
            {name: torch.from_numpy(parts[i].astype(np.int64) if name in BASE_COLUMNS else parts[i])
             for name, parts in columns.items()} | {"source_index": sources[i]}
            for i in range(len(lengths))
        ]  # fmt: skip
        return assemble_pack(sequences, alignment=self.alignment, pad_to=self.pad_to, pad_token_id=self.pad_token_id)
