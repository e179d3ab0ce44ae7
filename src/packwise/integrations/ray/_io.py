"""Ray engine, reading: cut the input into pieces in input order and read one piece on a worker.

Used by :func:`packwise.integrations.ray.pack_ray` (see its module docstring for why JSONL is cut into byte
ranges and Parquet into row groups rather than read with Ray Data).
"""

from __future__ import annotations

import io
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ...files import (
    Kind,
    RawInput,
    check_jsonl_file,
    check_shard_set,
    detect_format,
    detect_kind,
    from_rows,
    hf_dataset_files,
    input_digest,
    jsonl_lines,
    parquet_files,
    parse_line,
)
from ._fs import Loc, digest, hf_files, read_arrow, resolve

if TYPE_CHECKING:
    from ray import ObjectRef

PIECES_PER_CPU = 4  # tokenization tasks per cluster CPU, for load balance
PIECE_ROWS = (16, 100_000)  # rows per task: min, max
PIECE_BYTES = (64 << 10, 64 << 20)  # JSONL bytes per task: min, max


def _source(
    ray, data, fmt: str | None, skip: bool, cpus: int, filesystem=None
) -> tuple[str, Kind, list, str | ObjectRef | None]:
    """``(name, kind, pieces, fingerprint)``; a piece is ``(tag, data or ObjectRef, meta)``, in input order.
    The fingerprint is a string, an ObjectRef to one, or None (summed from per-row digests by the pieces).
    A URI (``s3://...``) or a path on ``filesystem`` is read through pyarrow's filesystem (see ``_fs``)."""
    if isinstance(data, (list, tuple, RawInput, pa.Table)) or type(data).__module__.startswith("datasets"):
        raw = data if isinstance(data, RawInput) else from_rows(data, name=type(data).__name__)
        if raw.line_numbers is not None or raw.errors:
            raise TypeError(f"{raw.name}: pass a file as its path to pack_ray, not as a RawInput read from it")
        step = _piece_rows(raw.num_rows, cpus)
        if raw.rows is not None:
            pieces: list[tuple[str, object, tuple]] = [
                ("rows", ray.put(raw.rows[a : a + step]), (a,)) for a in range(0, raw.num_rows, step)
            ]
        else:
            ref = ray.put(raw.table)
            pieces = [("block", ref, (a, min(a + step, raw.num_rows), a)) for a in range(0, raw.num_rows, step)]
        return raw.name, raw.kind, pieces, raw.fingerprint
    if type(data).__module__.startswith("ray.data") and isinstance(data, ray.data.Dataset):  # no Ray Data import
        name = data.name or "ray.data.Dataset"
        pieces, names = _dataset_pieces(data, cpus)
        if not pieces:
            raise ValueError(f"{name}: no rows")
        return name, detect_kind(names, name), pieces, None
    if not isinstance(data, (str, os.PathLike)):
        raise TypeError(
            f"pack_ray takes a JSONL/Parquet/HF-dataset path or URI, a ray.data.Dataset, a list of dict rows, a "
            f"pyarrow.Table or a datasets.Dataset, got {type(data).__name__}; convert it to one of those"
        )
    loc = resolve(data, filesystem)
    if loc is not None:
        return _remote_source(ray, loc, fmt, skip, cpus)
    path = Path(data)  # as given: the input's name in messages and metadata.json, as the local engine's
    if not path.exists():
        raise ValueError(f"input {path} does not exist")
    full = path.absolute()  # what workers open: their working directory need not be the driver's
    fmt = fmt or detect_format(path)
    if fmt == "jsonl":
        check_jsonl_file(path)  # a directory, or a gzip/Parquet file named .jsonl: the local reader's message
        kind = _jsonl_kind(path, skip)
        step = min(max(math.ceil(path.stat().st_size / (PIECES_PER_CPU * cpus)), PIECE_BYTES[0]), PIECE_BYTES[1])
        ranges = _jsonl_ranges(path, step)
        count = ray.remote(_count_newlines)
        newlines = ray.get([count.remote(str(full), lo, hi) for lo, hi in ranges])
        first = np.cumsum([1, *newlines[:-1]]).tolist()  # 1-based number of each range's first line
        pieces = [("jsonl", str(full), (lo, hi, n)) for (lo, hi), n in zip(ranges, first)]
        return str(path), kind, pieces, ray.remote(input_digest).remote([full])
    if fmt == "hf":
        files = [f.absolute() for f in hf_dataset_files(path)]
        kind, pieces = _arrow_pieces(ray, [str(f) for f in files], str(path), cpus)
        return str(path), kind, pieces, ray.remote(input_digest).remote(files)
    import pyarrow.parquet as pq

    files = [f.absolute() for f in parquet_files(path)]  # complete shard sets, as the local reader checks
    try:  # the local reader's message for a file that is not Parquet or files whose columns clash
        schema = pa.unify_schemas([pq.read_schema(f) for f in files], promote_options="default")
        footers = [pq.ParquetFile(f).metadata for f in files]
    except (pa.ArrowException, OSError) as e:
        raise ValueError(f"input {path} cannot be read as parquet: {e}") from e
    pieces = _parquet_pieces([str(f) for f in files], footers, schema, str(path), cpus)
    return str(path), detect_kind(schema.names, str(path)), pieces, ray.remote(input_digest).remote(files)


def _remote_source(
    ray, loc: Loc, fmt: str | None, skip: bool, cpus: int
) -> tuple[str, Kind, list, str | ObjectRef | None]:
    """As the local branch of :func:`_source`, for a file or directory on a pyarrow filesystem."""
    import pyarrow.parquet as pq

    if not loc.exists():
        raise ValueError(f"input {loc} does not exist")
    if fmt is None:
        if loc.is_dir():
            fmt = "hf" if loc.child("state.json").exists() or loc.list(".arrow") else "parquet"
        else:
            fmt = detect_format(Path(loc.path.rsplit("/", 1)[-1]))
    if fmt == "jsonl":
        kind = _jsonl_kind(loc, skip)
        step = min(max(math.ceil(loc.size() / (PIECES_PER_CPU * cpus)), PIECE_BYTES[0]), PIECE_BYTES[1])
        ranges = _jsonl_ranges(loc, step)
        newlines = ray.get([ray.remote(_count_newlines).remote(loc, lo, hi) for lo, hi in ranges])
        first = np.cumsum([1, *newlines[:-1]]).tolist()
        pieces = [("jsonl", loc, (lo, hi, n)) for (lo, hi), n in zip(ranges, first)]
        return str(loc), kind, pieces, ray.remote(digest).remote([loc])
    if fmt == "hf":
        files = hf_files(loc)
        kind, pieces = _arrow_pieces(ray, files, str(loc), cpus)
        return str(loc), kind, pieces, ray.remote(digest).remote(files)
    files = loc.list(".parquet") if loc.is_dir() else [loc]
    if loc.is_dir():  # the local reader's check on the names: one complete shard set
        check_shard_set(loc, [f.path.rsplit("/", 1)[-1] for f in files])
    if not files:
        raise ValueError(f"input {loc}: a directory without *.arrow (saved HF dataset) or *.parquet files")
    try:
        schema = pa.unify_schemas([pq.read_schema(f.path, filesystem=f.fs) for f in files], promote_options="default")
        footers = [pq.ParquetFile(f.path, filesystem=f.fs).metadata for f in files]
    except (pa.ArrowException, OSError) as e:
        raise ValueError(f"input {loc} cannot be read as parquet: {e}") from e
    pieces = _parquet_pieces(files, footers, schema, str(loc), cpus)
    return str(loc), detect_kind(schema.names, str(loc)), pieces, ray.remote(digest).remote(files)


def _parquet_pieces(files: list, footers: list, schema: pa.Schema, name: str, cpus: int) -> list:
    """Pieces of whole consecutive row groups of about ``_piece_rows`` rows, read by the task that tokenizes
    them (nothing is read ahead into the object store). Runs of groups are not sliced, so each is read once;
    only a single row group longer than a piece is cut into slices (each slice reads the group)."""
    total = sum(m.num_rows for m in footers)
    if total == 0:
        raise ValueError(f"input {name} is empty (no rows)")
    step, pieces, row = _piece_rows(total, cpus), [], 0
    for f, meta in zip(files, footers):
        sizes = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
        g = 0
        while g < len(sizes):
            end, n = g + 1, sizes[g]
            while end < len(sizes) and n + sizes[end] <= step:
                end, n = end + 1, n + sizes[end]
            groups = tuple(range(g, end))  # one group when n > step: its slices each read it
            pieces += [("parquet", f, (groups, a, min(a + step, n), row + a, schema)) for a in range(0, n, step)]
            g, row = end, row + n
    return pieces


def _arrow_pieces(ray, files: list, name: str, cpus: int) -> tuple[Kind, list]:
    """``(kind, pieces)`` of a saved HF dataset: row ranges of its Arrow files, read by the tokenize tasks."""
    counts = ray.get([ray.remote(_arrow_rows).remote(f) for f in files])
    if sum(n for n, _ in counts) == 0:
        raise ValueError(f"input {name} is empty (no rows)")
    step, pieces, row = _piece_rows(sum(n for n, _ in counts), cpus), [], 0
    for f, (n, _) in zip(files, counts):
        pieces += [("arrow", f, (a, min(a + step, n), row + a)) for a in range(0, n, step)]
        row += n
    names = next(names for n, names in counts if names)
    return detect_kind(names, name), pieces


def _arrow_rows(loc) -> tuple[int, list[str]]:
    table = read_arrow(loc)
    return table.num_rows, table.column_names


def _piece_rows(total: int, cpus: int) -> int:
    return min(max(math.ceil(total / (PIECES_PER_CPU * cpus)), PIECE_ROWS[0]), PIECE_ROWS[1])


def _dataset_pieces(ds, cpus: int) -> tuple[list, list[str]]:
    """Blocks of a Ray Dataset in order, cut into slices (zero-copy), and its column names."""
    ctx = ds.context
    saved = ctx.execution_options.preserve_order, ctx.enable_progress_bars
    ctx.execution_options.preserve_order, ctx.enable_progress_bars = True, False
    try:
        blocks: list = []
        names: list[str] = []
        for bundle in ds.iter_internal_ref_bundles():
            names = names or (list(bundle.schema.names) if bundle.schema is not None else [])
            for entry, part in zip(bundle.blocks, bundle.slices):
                lo, hi = (0, entry.metadata.num_rows) if part is None else (part.start_offset, part.end_offset)
                if hi is None:
                    raise RuntimeError("packwise: a Ray Data block without a row count; materialize() the dataset")
                blocks.append((entry.ref, lo, hi))
    finally:
        ctx.execution_options.preserve_order, ctx.enable_progress_bars = saved
    step, pieces, row = _piece_rows(sum(hi - lo for _, lo, hi in blocks), cpus), [], 0
    for ref, lo, hi in blocks:
        pieces += [("block", ref, (a, min(a + step, hi), row + a - lo)) for a in range(lo, hi, step)]
        row += hi - lo
    return pieces, names


def _open(where):
    """A binary file with seek/read/readline: a local path, or a :class:`Loc` on a pyarrow filesystem."""
    return io.BufferedReader(where.open()) if isinstance(where, Loc) else open(where, "rb")


def _skip_line(f) -> int:
    """Bytes from where ``f`` stands to just after the next newline (or the end), read in blocks, kept none."""
    n = 0
    while block := f.read(1 << 20):
        if (i := block.find(b"\n")) >= 0:
            return n + i + 1
        n += len(block)
    return n


def _jsonl_kind(path, skip: bool) -> Kind:
    """The row kind, from the first valid line as the local reader decides it (reads only that far)."""
    bad = 0
    with _open(path) as f:
        for lineno, raw in jsonl_lines(f, path):  # the local reader's line bound and message
            if not raw.strip():
                continue
            try:
                row = parse_line(raw, str(path), lineno)
            except ValueError:
                if not skip:
                    raise
                bad += 1
                continue
            return detect_kind(row.keys(), f"{path} line {lineno}")
    raise ValueError(
        f"input {path}: no line is a valid row ({bad} bad line{'' if bad == 1 else 's'}, all skipped)"
        if bad
        else f"input {path} is empty (no rows)"
    )


def _jsonl_ranges(path, step: int) -> list[tuple[int, int]]:
    """Byte ranges of about ``step`` bytes, each ending just after a newline or at the end of the file."""
    size, cuts = path.size() if isinstance(path, Loc) else path.stat().st_size, [0]
    with _open(path) as f:
        while cuts[-1] + step < size:
            f.seek(cuts[-1] + step)
            cuts.append(cuts[-1] + step + _skip_line(f))
    return [(lo, hi) for lo, hi in zip(cuts, [*cuts[1:], size]) if lo < hi]


def _count_newlines(path, lo: int, hi: int) -> int:
    n = 0
    with _open(path) as f:
        f.seek(lo)
        while lo < hi and (block := f.read(min(1 << 22, hi - lo))):
            n, lo = n + block.count(b"\n"), lo + len(block)
    return n


def _read_parquet(path, groups: list[int], schema: pa.Schema) -> pa.Table:
    """Row groups of one file, with the columns and types of all files together (as the local reader)."""
    import pyarrow.parquet as pq

    file = pq.ParquetFile(path.path, filesystem=path.fs) if isinstance(path, Loc) else pq.ParquetFile(path)
    return pa.concat_tables([schema.empty_table(), file.read_row_groups(groups)], promote_options="default")


@dataclass
class _Piece(RawInput):
    """Rows numbered from ``start``, so error messages name rows of the whole input."""

    start: int = 0

    def locate(self, i: int) -> str:
        return super().locate(i) if self.line_numbers is not None else f"{self.name} row {self.start + i}"


def _read_piece(tag: str, data, meta: tuple, name: str, kind: Kind) -> _Piece:
    if tag == "rows":
        return _Piece(name=name, kind=kind, rows=data, start=meta[0])
    if tag == "block":
        if not isinstance(data, pa.Table):
            from ray.data.block import BlockAccessor

            data = BlockAccessor.for_block(data).to_arrow()
        return _Piece(name=name, kind=kind, table=data.slice(meta[0], meta[1] - meta[0]), start=meta[2])
    if tag == "parquet":
        groups, lo, hi, start, schema = meta
        table = _read_parquet(data, list(groups), schema)
        return _Piece(name=name, kind=kind, table=table.slice(lo, hi - lo), start=start)
    if tag == "arrow":
        lo, hi, start = meta
        return _Piece(name=name, kind=kind, table=read_arrow(data).slice(lo, hi - lo), start=start)
    lo, hi, first = meta
    rows: list[dict | None] = []  # None: a line that could not be parsed (RawInput.rows)
    numbers: list[int] = []
    errors: list[tuple[int, str]] = []
    with _open(data) as f:
        f.seek(lo)
        for lineno, raw in jsonl_lines(f, name, first=first, size=hi - lo):  # the local reader's bound
            if raw.strip():
                try:
                    rows.append(parse_line(raw, name, lineno))
                except ValueError as e:
                    errors.append((len(rows), str(e)))
                    rows.append(None)
                numbers.append(lineno)
    return _Piece(name=name, kind=kind, rows=rows, errors=errors, line_numbers=numbers)
