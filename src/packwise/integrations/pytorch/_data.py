"""``PackedParquetDataset``: the output of ``packwise pack`` as a map-style torch Dataset of packs."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast, get_args

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torch.utils.data import Dataset, Sampler

from ...assemble import (
    RESERVED,  # the input names assemble_pack reads itself (one definition)
    PackedSequence,
    assemble_pack,
)
from ...constants import MediaFamily
from ...files import (
    cell_values,
    check_checksum,
    check_column_types,
    packed_files,
    read_metadata,
    sha256_file,
    shard_records,
)
from ...plan import Cost, assign_to_ranks, pack_costs

BASE_COLUMNS = ("input_ids", "labels", "seq_lengths", "source_index")
IMAGE_COLUMNS = ("image_paths", "image_sha256", "image_grid_thw", "images_per_sequence")
AUDIO_COLUMNS = ("audio_paths", "audio_frames", "audios_per_sequence")
VIDEO_COLUMNS = ("video_paths", "video_grid_thw", "second_per_grid_ts", "videos_per_sequence")


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
        verify_checksums: hash every shard once (SHA-256, on construction) and refuse one whose hash is not the
            one ``metadata.json`` records; False skips that read of the whole output (huge outputs). Outputs
            written before packwise recorded hashes are not checked.
        media_family: the model family whose media the caller expects (``"qwen2.5-vl"``: MRoPE positions,
            ``image_grid_thw``, Whisper features; ``"nemotron-omni"``: ``image_grid_hw``, Parakeet
            ``input_features_mask``, 1-D positions); None takes the one metadata.json records.

    Raises:
        ValueError: ``path`` is not a packwise packed dataset, or a shard was changed after packwise wrote it
            (naming the shard, the expected and actual hash), or ``media_family`` differs from the recorded one.

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

    def __init__(
        self, path, *, alignment: int = 1, pad_to: int | None = None, pad_token_id: int = 0,
        verify_checksums: bool = True, media_family: MediaFamily | None = None,
    ) -> None:  # fmt: skip
        self.path = Path(path)
        self.metadata = read_metadata(self.path)
        _check_family(self.metadata.get("multimodal") or {}, media_family, self.path)
        self.files = [str(f) for f in packed_files(self.path)]
        counts = [s["packs"] for s in self.metadata["shards"]]
        shards = shard_records(self.path, self.metadata["shards"]) if verify_checksums else self.metadata["shards"]
        for f, expected, shard in zip(self.files, counts, shards):
            if verify_checksums and "sha256" in shard:
                check_checksum(Path(f), shard, *sha256_file(f))
            try:
                pf = pq.ParquetFile(f)
                meta, names = pf.metadata, set(pf.schema_arrow.names)
            except (pa.ArrowException, OSError) as e:
                raise ValueError(
                    f"{f} cannot be read as Parquet ({e}); the shard is truncated or damaged — re-run packwise pack"
                ) from e
            if meta.num_rows != expected:
                raise ValueError(
                    f"{f} holds {meta.num_rows} packs but metadata.json says {expected}; the directory was modified "
                    "— re-run packwise pack"
                )
            missing = sorted(set(BASE_COLUMNS) - names)
            if missing:
                raise ValueError(f"{f} has no {missing[0]!r} column; it is not packwise output — re-run packwise pack")
            check_column_types(pf.schema_arrow, f)
        self._starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64).tolist()
        self.alignment, self.pad_to, self.pad_token_id = alignment, pad_to, pad_token_id
        self._open: dict[int, pq.ParquetFile] = {}
        self._cache: tuple[int, int, int, pa.Table] | None = None  # (file, group start, group end, table)
        if alignment != 1 or pad_to is not None:
            _check_fits(self, alignment, pad_to)

    def __len__(self) -> int:
        return self._starts[-1]

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_open"], state["_cache"] = {}, None
        return state

    def _row(self, index: int):
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise TypeError(
                f"PackedParquetDataset index must be an integer in [-{len(self)}, {len(self)}) (a pack), got "
                f"{index!r} ({type(index).__name__})"
            )
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
                    try:
                        table = pf.read_row_group(g)
                    except (pa.ArrowException, OSError) as e:
                        raise ValueError(
                            f"{self.files[f]}: row group {g} cannot be read ({e}); the shard is damaged — re-run "
                            "packwise pack"
                        ) from e
                    self._cache = c = (f, start, start + n, table)
                    break
                start += n
        found = cast("tuple[int, int, int, pa.Table]", c)  # some row group holds local (< the file's rows)
        return found[3].slice(local - found[1], 1)

    def pack_seq_lengths(self) -> list[np.ndarray]:
        """Each pack's sequence lengths (tokens), read from the ``seq_lengths`` column only."""
        out = []
        for f in self.files:
            col = pq.read_table(f, columns=["seq_lengths"]).column("seq_lengths").combine_chunks()
            offsets = col.offsets.to_numpy()
            values = col.values.to_numpy().astype(np.int64)
            out += [values[a:b] for a, b in zip(offsets[:-1], offsets[1:])]
        return out

    def __getitem__(self, index: int) -> PackedSequence:
        row = self._row(index)
        lengths = row.column("seq_lengths")[0].values.to_numpy()
        n_ids, n_labels = len(row.column("input_ids")[0]), len(row.column("labels")[0])
        if int(lengths.sum()) != n_ids or n_labels != n_ids or (lengths < 1).any():
            raise ValueError(
                f"{self.path} pack {index}: seq_lengths sum to {int(lengths.sum())} but the pack holds {n_ids} tokens "
                f"and {n_labels} labels; the data was modified — re-run packwise pack"
            )
        flat = {
            name: cell_values(row.column(name)[0])  # (T,) or (T, k, ...): list<fixed_size_list<...>> columns
            for name in row.column_names
            if name not in ("seq_lengths", "source_index", *IMAGE_COLUMNS, *AUDIO_COLUMNS, *VIDEO_COLUMNS)
        }
        flat = {name: v.astype(np.int64) if name in BASE_COLUMNS else v for name, v in flat.items()}
        sources = row.column("source_index")[0].values.to_numpy().tolist()
        options: dict[str, Any] = {
            "alignment": self.alignment,
            "pad_to": self.pad_to,
            "pad_token_id": self.pad_token_id,
        }
        if not {"image_paths", "video_paths", "audio_paths"} & set(row.column_names) and _flat_ok(flat):
            # the row is already the seam (flat columns + boundaries): one pack, no split and join
            cu = np.zeros(lengths.shape[0] + 1, dtype=np.int64)
            np.cumsum(lengths, out=cu[1:])
            return PackedSequence.from_flat(flat, cu, metadata={"source_index": sources}, **options)
        cuts = np.cumsum(lengths)[:-1]
        columns = {name: np.split(v, cuts) for name, v in flat.items()}
        sequences = [  # media: each sequence gets its own pixels and MRoPE positions
            {name: torch.from_numpy(parts[i]) for name, parts in columns.items()} | {"source_index": sources[i]}
            for i in range(len(lengths))
        ]  # fmt: skip
        multimodal = self.metadata.get("multimodal") or {}
        if multimodal.get("media_family") == "nemotron-omni":
            self._add_nemotron(row, index, sequences, multimodal)
        else:
            if "image_paths" in row.column_names:
                self._add_images(row, index, sequences)
            if "video_paths" in row.column_names:
                from ._media import add_video

                add_video(row, sequences, multimodal, where=f"{self.path} pack {index}")
            if "audio_paths" in row.column_names:
                from ._media import add_audio

                add_audio(row, sequences, multimodal, where=f"{self.path} pack {index}")
        return assemble_pack(sequences, **options)

    def _add_nemotron(self, row, index: int, sequences: list[dict], multimodal: dict) -> None:
        """Nemotron-Omni media and 1-D positions (``_nemotron.add_nemotron``), after the image hashes."""
        from ._nemotron import add_nemotron

        if "video_paths" in row.column_names:
            raise ValueError(f"{self.path} pack {index}: nemotron-omni packs hold no videos; re-run packwise pack")
        if "image_sha256" in row.column_names:
            root = multimodal.get("media_root")
            paths = [str(Path(root) / p) if root else p for p in row.column("image_paths")[0].as_py()]
            self._check_digests(paths, row.column("image_sha256")[0].as_py(), index)
        add_nemotron(row, sequences, multimodal, where=f"{self.path} pack {index}")

    def _add_images(self, row, index: int, sequences: list[dict]) -> None:
        """Re-materialise ``pixel_values`` from the recorded image paths and give every sequence its MRoPE
        positions (transformers' Qwen2.5-VL ``get_rope_index``, per sequence)."""
        from ...multimodal import VisionSpec, mrope_position_ids, process_images

        fields = VisionSpec.__dataclass_fields__
        spec = VisionSpec(**{k: v for k, v in (self.metadata.get("multimodal") or {}).items() if k in fields})
        paths = row.column("image_paths")[0].as_py()
        if "image_sha256" in row.column_names:  # outputs of packwise < 0.x carry no hashes
            root = Path(spec.media_root) if spec.media_root else None  # recorded paths are relative to it
            full = [str(root / p) if root else p for p in paths]
            self._check_digests(full, row.column("image_sha256")[0].as_py(), index)
        grids = np.asarray(row.column("image_grid_thw")[0].as_py(), dtype=np.int64).reshape(-1, 3)
        per_seq = row.column("images_per_sequence")[0].as_py()
        pixels, grid = process_images(paths, spec, where=f"{self.path} pack {index}")
        if not np.array_equal(grid.numpy(), grids):
            raise ValueError(
                f"{self.path} pack {index}: images changed since packing (grids {grid.tolist()} vs recorded "
                f"{grids.tolist()}); re-run packwise pack"
            )
        patches = np.concatenate([[0], np.cumsum(grids.prod(axis=1))])
        first = 0
        for seq, n in zip(sequences, per_seq):
            g = torch.from_numpy(grids[first : first + n])
            mm = seq.get("mm_token_type_ids", torch.zeros_like(seq["input_ids"]))
            if not {"audio_paths", "video_paths"} & set(row.column_names):  # else set by add_video / add_audio
                seq["position_ids"] = mrope_position_ids(seq["input_ids"], mm, g, spatial_merge_size=spec.merge_size)
            if n:
                seq["pixel_values"] = pixels[int(patches[first]) : int(patches[first + n])]
                seq["image_grid_thw"] = g
            first += n

    def _check_digests(self, paths: list[str], recorded: list[str], index: int) -> None:
        """Every image's bytes must still hash to what ``packwise pack`` recorded (a same-size replacement
        keeps its grid, so the grid check alone would train on the new pixels)."""
        from ...pipeline import image_digest

        for path, want in zip(paths, recorded):
            try:
                got = image_digest(path)
            except OSError as e:
                raise ValueError(
                    f"{self.path} pack {index}: image {path} cannot be read ({e}); re-run packwise pack"
                ) from e
            if got != want:
                raise ValueError(
                    f"{self.path} pack {index}: image {path} changed since packing (SHA-256 {got[:16]}..., recorded "
                    f"{want[:16]}...); restore the original file or re-run packwise pack"
                )


#: Columns ``assemble_pack`` reads as loss masks, positions or media: a row with one takes the per-sequence path.
_NOT_FLAT = frozenset(RESERVED) - {"input_ids", "labels"}


def _check_fits(ds: PackedParquetDataset, alignment: int, pad_to: int | None) -> None:
    """Load-time ``alignment`` / ``pad_to`` must keep every pack within the capacity metadata.json records."""
    capacity, written = ds.metadata.get("capacity"), ds.metadata.get("alignment", 1)
    if capacity is None:
        return
    where = f"{ds.path} was packed at capacity {capacity} (alignment {written})"
    if pad_to is not None and pad_to > capacity:
        raise ValueError(f"pad_to={pad_to} > the recorded capacity {capacity}: {where}; use pad_to <= {capacity}")
    if isinstance(alignment, int) and alignment > 1:
        for i, lengths in enumerate(ds.pack_seq_lengths()):
            total = int((-(-lengths // alignment) * alignment).sum())
            if total > capacity:
                raise ValueError(
                    f"alignment={alignment} makes pack {i} (sequences {lengths.tolist()}) {total} tokens > the "
                    f"recorded capacity {capacity}: {where}; load with alignment={written}, or re-run packwise "
                    f"pack --alignment {alignment}"
                )


def _check_family(multimodal: dict, expected: MediaFamily | None, path: Path) -> None:
    """The media family recorded in metadata.json must be a known one, and the one the caller expects."""
    family = multimodal.get("media_family", "qwen2.5-vl")  # outputs before media_family: Qwen2.5-VL media
    if family not in get_args(MediaFamily):
        raise ValueError(
            f"{path}: metadata.json's multimodal.media_family={family!r} is not one of "
            f"{', '.join(get_args(MediaFamily))}; this packwise cannot read it — re-pack with this version"
        )
    if expected is not None and expected not in get_args(MediaFamily):
        raise ValueError(f"media_family={expected!r} is not one of {', '.join(get_args(MediaFamily))}; pick one")
    if expected is not None and family != expected:
        raise ValueError(
            f"{path}: packed with media_family={family!r} but media_family={expected!r} was asked for; re-run packwise "
            f"pack --media-family {expected}, or load it as {family!r}"
        )


def _flat_ok(flat: dict[str, np.ndarray]) -> bool:
    """Whether a row's columns are what :meth:`PackedSequence.from_flat` takes: numeric ``(T, ...)`` columns, none
    in :data:`_NOT_FLAT`."""
    return all(v.ndim >= 1 and v.dtype.kind in "biuf" for v in flat.values()) and not _NOT_FLAT & set(flat)


class DistributedPackSampler(Sampler[int]):
    """Pack indices for this data-parallel rank of a map-style packed dataset under ``torch.distributed``.

    Every rank gets the same number of packs, balanced by cost with :func:`packwise.plan.assign_to_ranks`
    (LPT with equal counts); the epoch's seeded shuffle decides ties and the order packs are visited in.

    Args:
        dataset: a :class:`PackedParquetDataset` (or anything with ``pack_seq_lengths()``), or a list of
            per-pack sequence-length arrays.
        num_replicas: ranks (default: ``torch.distributed`` world size, else 1).
        rank: this rank (default: ``torch.distributed`` rank, else 0).
        shuffle: visit this rank's packs in a seeded random order (else largest first).
        seed: base seed; ``set_epoch`` changes the order every epoch.
        cost: ``tokens``, ``attention`` or a callable on a pack's lengths, e.g. a
            :class:`packwise.plan.ComputeCost` (``packwise.hf.model_cost(config)``: training FLOPs); see
            ``packwise.plan.pack_costs``.
        drop_last: when the pack count is not a multiple of ``num_replicas``, drop the remainder (counted
            in ``num_dropped``); without it that case is an error naming the fix.

    Raises:
        ValueError: the pack count is not a multiple of ``num_replicas`` and ``drop_last`` is False, or
            ``rank`` out of range.

    Example:
        >>> packs = [np.array([4, 4]), np.array([8]), np.array([2]), np.array([6])]   # 8, 8, 2, 6 tokens
        >>> s = DistributedPackSampler(packs, num_replicas=2, rank=0)
        >>> sorted(s), len(s), s.assignment().costs
        ([1, 3], 2, [14.0, 10.0])
    """

    def __init__(
        self,
        dataset,
        *,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        cost: Cost | Callable = "tokens",
        drop_last: bool = False,
    ) -> None:
        dist = torch.distributed
        ready = dist.is_available() and dist.is_initialized()
        self.num_replicas = num_replicas if num_replicas is not None else (dist.get_world_size() if ready else 1)
        self.rank = rank if rank is not None else (dist.get_rank() if ready else 0)
        for name, value in (("num_replicas", self.num_replicas), ("rank", self.rank), ("seed", seed)):
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"{name}={value!r} is a {type(value).__name__}; give an integer")
        if self.num_replicas < 1:
            raise ValueError(f"num_replicas must be >= 1 (data-parallel ranks), got {self.num_replicas}")
        if not 0 <= self.rank < self.num_replicas:
            raise ValueError(f"rank {self.rank} is out of range for {self.num_replicas} replicas")
        if hasattr(dataset, "pack_seq_lengths"):
            lengths = dataset.pack_seq_lengths()
        elif hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__"):  # map-style: its len(), not iter()
            lengths = [dataset[i] for i in range(len(dataset))]
        else:
            lengths = list(dataset)
        bad = next((i for i, x in enumerate(lengths) if isinstance(x, (Mapping, str, bytes))), None)
        if bad is not None:
            raise TypeError(
                f"DistributedPackSampler: pack {bad} is a {type(lengths[bad]).__name__}, not its sequence lengths; "
                "pass a PackedParquetDataset (or anything with pack_seq_lengths()) or a list of per-pack length arrays"
            )
        self.costs = pack_costs(lengths, cost)
        p = self.costs.shape[0]
        self.num_dropped = p % self.num_replicas if drop_last else 0
        if p % self.num_replicas and not drop_last:
            raise ValueError(
                f"{p} packs cannot give {self.num_replicas} ranks the same number of micro-batches; pack with "
                f"`packwise pack --pack-count-multiple {self.num_replicas}` (plan_packs(pack_count_multiple=...)) "
                "or pass drop_last=True"
            )
        self.shuffle, self.seed, self.epoch = shuffle, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def assignment(self):
        """This epoch's :class:`~packwise.plan.RankAssignment` for all ranks (``imbalance`` = max/mean cost)."""
        rng = np.random.default_rng([self.seed, self.epoch])
        p = self.costs.shape[0]
        keep = np.sort(rng.permutation(p)[: p - self.num_dropped]) if self.num_dropped else np.arange(p)
        tie = rng.permutation(keep.shape[0])
        a = assign_to_ranks(self.costs[keep], num_ranks=self.num_replicas, tie_break=tie)
        for r in range(len(a)):
            a[r] = [int(keep[i]) for i in a[r]]
        return a

    def __iter__(self):
        mine = self.assignment()[self.rank]
        if self.shuffle:
            mine = [mine[i] for i in np.random.default_rng([self.seed, self.epoch, self.rank]).permutation(len(mine))]
        return iter(mine)

    def __len__(self) -> int:
        return (self.costs.shape[0] - self.num_dropped) // self.num_replicas
