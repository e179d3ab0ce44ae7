"""Writing and loading a packed dataset directory, atomically.

Layout::

    OUT/
      packs-00000-of-00002.parquet   one row per pack (schema: see packwise.pipeline._table)
      packs-00001-of-00002.parquet
      metadata.json                  settings, fingerprints, token accounting, metrics, plan_hash, and per
                                     shard its packs, bytes and SHA-256 (checked by the loaders)

Everything is written into a staging directory inside ``OUT`` and moved into place under an exclusive lock
with a commit journal (see :mod:`packwise.files._output`), so an interrupted write leaves the old complete
output or the new complete one, never a mix, and ``--overwrite`` removes only files packwise wrote
(``.packwise-manifest.json`` names them). The output holds no timestamps or timings: the same input and
settings give byte-identical files.
"""

from __future__ import annotations

import hashlib
import io
import json
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ._lines import read_own_json
from ._output import JOURNAL, check_output_dir, claim_output, finish_interrupted  # noqa: F401  (check_output_dir: re-exported)
from ._owned import FORMAT
from ._verify import (  # noqa: F401  (the loaders' checks; re-exported for callers of this module)
    INT_LIST_COLUMNS,
    METADATA,
    check_checksum,
    check_column_types,
    check_rows,
    sha256_file,
    shard_records,
)

ROW_GROUP_PACKS = 256


def shard_name(i: int, n: int) -> str:
    return f"packs-{i:05d}-of-{n:05d}.parquet"


class _HashingSink(io.RawIOBase):
    """A write-only binary file that forwards to ``f`` and hashes (SHA-256) and counts what passes."""

    def __init__(self, f) -> None:
        self.f, self.sha, self.size = f, hashlib.sha256(), 0

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        self.sha.update(b)
        self.size += len(b)
        self.f.write(b)
        return len(b)


def write_shard(table: pa.Table, path, *, filesystem=None) -> dict:
    """Write one packed shard (Parquet, ``ROW_GROUP_PACKS`` packs per row group) and return its
    ``metadata.json`` entry — THE shard writer of both engines (``write_packed`` and the Ray writer tasks),
    so their bytes and records are the same.

    Args:
        table: the shard, one row per pack (P rows).
        path: the file to write, a local path or, with ``filesystem``, a path on that pyarrow filesystem;
            its base name is the entry's ``file`` (``packs-NNNNN-of-NNNNN.parquet``).
        filesystem: a ``pyarrow.fs.FileSystem`` for remote output; None writes a local file.

    Returns:
        ``{"file": name, "packs": P, "bytes": size in bytes, "sha256": hex digest of the file}``; the
        bytes are hashed as they are written (one pass, nothing read back).

    Example:
        >>> import tempfile, hashlib
        >>> from pathlib import Path
        >>> f = Path(tempfile.mkdtemp()) / "packs-00000-of-00001.parquet"
        >>> e = write_shard(pa.table({"input_ids": [[1, 2], [3]]}), f)
        >>> e["file"], e["packs"], e["bytes"] == f.stat().st_size
        ('packs-00000-of-00001.parquet', 2, True)
        >>> e["sha256"] == hashlib.sha256(f.read_bytes()).hexdigest()
        True
    """
    with filesystem.open_output_stream(str(path)) if filesystem is not None else open(path, "wb") as f:
        sink = _HashingSink(f)
        pq.write_table(table, sink, row_group_size=ROW_GROUP_PACKS)
    name = str(path).rsplit("/", 1)[-1]
    return {"file": name, "packs": table.num_rows, "bytes": sink.size, "sha256": sink.sha.hexdigest()}


def write_packed(
    out,
    tables: Iterator[pa.Table] | list[pa.Table],
    num_shards: int,
    metadata: dict,
    *,
    overwrite: bool = False,
    on_shard: Callable[[int], None] | None = None,
) -> Path:
    """Write shards and ``metadata.json`` to ``out``: staged, then committed under the output's lock.

    Args:
        out: output directory.
        tables: one Arrow table per shard, in order.
        num_shards: how many tables ``tables`` yields.
        metadata: JSON-serialisable settings and counts; ``format`` and ``shards`` are added.
        overwrite: replace the files an earlier packwise run wrote in ``out`` (nothing else).
        on_shard: called with the packs written after each shard.

    ``out`` may be an open :class:`~packwise.files._output.OutputDir`: the files are then staged and the
    caller commits (``packwise pack`` adds its report files first).

    Raises:
        ValueError: ``out`` is not empty and ``overwrite`` is False, holds files packwise did not write,
            or another run is writing it.
    """
    dest = claim_output(out, overwrite=overwrite)
    owner = dest._depth == 0  # the caller did not open it: this call commits and releases
    with dest:
        tmp = dest.staging()
        shards = []
        for i, table in enumerate(tables):
            shards.append(write_shard(table, tmp / shard_name(i, num_shards)))
            if on_shard is not None:
                on_shard(table.num_rows)
        if len(shards) != num_shards:
            raise RuntimeError(f"packwise internal error: wrote {len(shards)} of {num_shards} shards")
        write_metadata(tmp, metadata, shards)
        if owner:
            dest.commit()
    if owner:
        for note in dest.notes:
            warnings.warn(note, stacklevel=2)
    return dest.path


def metadata_text(metadata: dict, shards: list[dict]) -> str:
    """``metadata.json``'s text: ``format``, the settings and counts, ``shards`` (sorted keys: reproducible)."""
    return json.dumps({"format": FORMAT, **metadata, "shards": shards}, indent=2, sort_keys=True) + "\n"


def write_metadata(directory: Path, metadata: dict, shards: list[dict]) -> None:
    """``metadata.json`` (``format``, the settings and counts, ``shards``) into ``directory``."""
    (directory / METADATA).write_text(metadata_text(metadata, shards))


def read_metadata(path) -> dict:
    """The ``metadata.json`` of a packed dataset directory.

    Raises:
        ValueError: ``path`` is not a packwise packed dataset.

    Example:
        >>> import tempfile, pyarrow as pa
        >>> d = tempfile.mkdtemp() + "/out"
        >>> _ = write_packed(d, [pa.table({"input_ids": [[1, 2], [3]]})], 1, {"capacity": 2})
        >>> meta = read_metadata(d)
        >>> meta["capacity"], meta["format"], [s["packs"] for s in meta["shards"]]
        (2, 'packwise-packed-v1', [2])
    """
    path = Path(path)
    _finish_interrupted(path)
    meta_path = path / METADATA
    if not meta_path.exists():
        raise ValueError(f"{path} is not a packwise packed dataset (no {METADATA}); write one with `packwise pack`")
    try:
        meta = read_own_json(meta_path)
    except OSError as e:
        raise ValueError(f"{meta_path} cannot be read ({e}); re-run packwise pack") from e
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        got = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise ValueError(f"{meta_path}: format {got!r}, expected {FORMAT!r}")
    shards = meta.get("shards")
    if not isinstance(shards, list) or not all(_shard_entry(x) for x in shards):
        raise ValueError(
            f"{meta_path}: 'shards' must list {{file, packs[, bytes, sha256]}} entries; the file was edited — re-run "
            "packwise pack"
        )
    return meta


def _shard_entry(x) -> bool:
    if not (isinstance(x, dict) and isinstance(x.get("file"), str) and isinstance(x.get("packs"), int)):
        return False
    sha, size = x.get("sha256"), x.get("bytes")
    if sha is None and size is None:  # written before packwise recorded them
        return True
    hexdigits = isinstance(sha, str) and len(sha) == 64 and all(c in "0123456789abcdef" for c in sha)
    return hexdigits and isinstance(size, int) and not isinstance(size, bool) and size >= 0


def _finish_interrupted(path: Path) -> None:
    """Roll an interrupted commit forward (its journal is present) so a reader never sees a mix."""
    if not (path / JOURNAL).exists():
        return
    try:
        finish_interrupted(path)
    except ValueError as e:
        if (path / JOURNAL).exists():
            raise ValueError(
                f"{path}: a packwise write is replacing the files ({JOURNAL} is present) and cannot be finished "
                f"here ({e}); wait for the run, or run packwise pack -o {path} again"
            ) from None


def packed_files(path) -> list[Path]:
    """The shard files of a packed dataset, in order.

    Raises:
        ValueError: a shard listed in ``metadata.json`` is missing.
    """
    path = Path(path)
    files = [path / s["file"] for s in read_metadata(path)["shards"]]
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise ValueError(f"{path}: shard {missing[0]} listed in metadata.json is missing; re-run packwise pack")
    return files


def load_packed(path, *, verify_checksums: bool = True) -> pa.Table:
    """Read a directory written by ``packwise pack`` back as one Arrow table (one row per pack).

    ``datasets.load_dataset("parquet", data_files=str(path / "packs-*.parquet"))`` reads the same files.

    Args:
        path: the output directory.
        verify_checksums: check each shard's size and SHA-256 against ``metadata.json`` before using it (the
            file is read once: its bytes are hashed, then parsed from memory). An output written before
            packwise recorded hashes loads without the check.

    Raises:
        ValueError: ``path`` is not a packwise packed dataset, or a shard was changed after packwise wrote
            it (its SHA-256 differs: both hashes are named), is truncated/unreadable, holds another number of
            packs than ``metadata.json`` says, or lacks a column — naming the file.

    Example:
        >>> import tempfile, pyarrow as pa
        >>> d = tempfile.mkdtemp() + "/out"
        >>> _ = write_packed(d, [pa.table({"input_ids": [[1, 2], [3]]})], 1, {"capacity": 2})
        >>> load_packed(d).column("input_ids").to_pylist()
        [[1, 2], [3]]
    """
    meta = read_metadata(path)
    need = {"input_ids"} | ({"labels", "seq_lengths", "source_index"} if "tokens_packed" in meta else set())
    tables: list[pa.Table] = []
    for f, shard in zip(
        packed_files(path), shard_records(path, meta["shards"]) if verify_checksums else meta["shards"]
    ):
        try:
            if verify_checksums and "sha256" in shard:
                data = f.read_bytes()
                check_checksum(f, shard, len(data), hashlib.sha256(data).hexdigest())
                t = pq.read_table(pa.BufferReader(data))
            else:
                t = pq.read_table(f)
        except (pa.ArrowException, OSError) as e:
            raise ValueError(
                f"{f} cannot be read as Parquet ({e}); the shard is truncated or damaged — re-run packwise pack"
            ) from e
        missing = sorted(need - set(t.column_names)) or sorted(
            set(tables[0].column_names) - set(t.column_names) if tables else []
        )
        if missing:
            raise ValueError(f"{f} has no {missing[0]!r} column; the shard was modified — re-run packwise pack")
        if t.num_rows != shard["packs"]:
            raise ValueError(
                f"{f} holds {t.num_rows} packs but metadata.json says {shard['packs']}; re-run packwise pack"
            )
        check_rows(t, f)
        tables.append(t)
    try:
        return pa.concat_tables(tables)
    except pa.ArrowInvalid as e:
        raise ValueError(
            f"{path}: the shards' columns differ ({e}); the directory was modified — re-run packwise pack"
        ) from e
