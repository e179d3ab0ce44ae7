"""Writing and loading a packed dataset directory, atomically.

Layout::

    OUT/
      packs-00000-of-00002.parquet   one row per pack (schema: see packwise.pipeline._table)
      packs-00001-of-00002.parquet
      metadata.json                  settings, fingerprints, token accounting, metrics, plan_hash

Everything is written into a temporary sibling directory and renamed into place at the end, so an
interrupted write never leaves a partial dataset at ``OUT``. The output holds no timestamps or timings:
the same input and settings give byte-identical files.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

FORMAT = "packwise-packed-v1"
METADATA = "metadata.json"
ROW_GROUP_PACKS = 256


def shard_name(i: int, n: int) -> str:
    return f"packs-{i:05d}-of-{n:05d}.parquet"


def check_output_dir(out, *, overwrite: bool, inputs: tuple = ()) -> Path:
    """Refuse an unusable output path before any work is done.

    ``overwrite`` only ever replaces an earlier packwise output (a directory with a packwise
    ``metadata.json``) or an empty directory — never a directory holding anything else, the current
    directory, or the input.

    Raises:
        ValueError: ``out`` is a file, a non-empty directory without ``overwrite``, a non-empty directory
            that is not a packwise output, the input or a directory containing it, or below a file or an
            unwritable directory.
    """
    out = Path(out)
    if out.is_symlink() and not out.exists():
        raise ValueError(f"output {out} is a dangling symbolic link; pass a directory path")
    if out.exists() and not out.is_dir():
        raise ValueError(f"output {out} exists and is a file; pass a directory path")
    resolved = out.resolve()
    for src in inputs:
        src = Path(src).resolve()
        if src == resolved or resolved in src.parents:
            raise ValueError(f"output {out} is or contains the input {src}; write the packs somewhere else")
    if resolved == Path.cwd().resolve():
        raise ValueError(f"output {out} is the current directory; pass a new directory, e.g. -o packed")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise ValueError(f"output directory {out} is not empty; pass --overwrite (overwrite=True) or another path")
        if not _is_packwise_output(out):
            raise ValueError(
                f"output directory {out} is not empty and is not a packwise output (no packwise metadata.json); "
                "--overwrite only replaces earlier packwise outputs — pass a new or empty directory"
            )
    parent = resolved.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ValueError(f"output {out}: {parent} is a file, so the directory cannot be created")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"output {out}: no permission to write in {parent}")
    return out


def _is_packwise_output(path: Path) -> bool:
    try:
        return json.loads((path / METADATA).read_text()).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def temp_dir(out: Path) -> Path:
    """A new temporary directory next to ``out`` (renamed onto it when complete), with the umask's mode."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    except OSError as e:
        raise ValueError(
            f"output {out}: cannot create it in {out.parent} ({e.strerror}); pick a writable directory"
        ) from None
    umask = os.umask(0)
    os.umask(umask)
    tmp.chmod(0o777 & ~umask)
    return tmp


def write_packed(
    out,
    tables: Iterator[pa.Table] | list[pa.Table],
    num_shards: int,
    metadata: dict,
    *,
    overwrite: bool = False,
    on_shard: Callable[[int], None] | None = None,
) -> Path:
    """Write shards and ``metadata.json`` to ``out`` atomically (temporary directory, then rename).

    Args:
        out: output directory.
        tables: one Arrow table per shard, in order.
        num_shards: how many tables ``tables`` yields.
        metadata: JSON-serialisable settings and counts; ``format`` and ``shards`` are added.
        overwrite: replace an existing non-empty ``out``.
        on_shard: called with the packs written after each shard.

    Raises:
        ValueError: ``out`` is not empty and ``overwrite`` is False.
    """
    out = check_output_dir(out, overwrite=overwrite)
    out = out.resolve()
    tmp = temp_dir(out)
    try:
        shards = []
        for i, table in enumerate(tables):
            name = shard_name(i, num_shards)
            pq.write_table(table, tmp / name, row_group_size=ROW_GROUP_PACKS)
            shards.append({"file": name, "packs": table.num_rows})
            if on_shard is not None:
                on_shard(table.num_rows)
        if len(shards) != num_shards:
            raise RuntimeError(f"packwise internal error: wrote {len(shards)} of {num_shards} shards")
        meta = {"format": FORMAT, **metadata, "shards": shards}
        (tmp / METADATA).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        old = None
        if out.exists():
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            os.replace(out, old)
        os.replace(tmp, out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def read_metadata(path) -> dict:
    """The ``metadata.json`` of a packed dataset directory.

    Raises:
        ValueError: ``path`` is not a packwise packed dataset.
    """
    path = Path(path)
    meta_path = path / METADATA
    if not meta_path.exists():
        raise ValueError(f"{path} is not a packwise packed dataset (no {METADATA}); write one with `packwise pack`")
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{meta_path} cannot be read as JSON ({e}); re-run packwise pack") from e
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        got = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise ValueError(f"{meta_path}: format {got!r}, expected {FORMAT!r}")
    shards = meta.get("shards")
    if not isinstance(shards, list) or not all(
        isinstance(x, dict) and isinstance(x.get("file"), str) and isinstance(x.get("packs"), int) for x in shards
    ):
        raise ValueError(
            f"{meta_path}: 'shards' must list {{file, packs}} entries; the file was edited — re-run packwise pack"
        )
    return meta


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


def load_packed(path) -> pa.Table:
    """Read a directory written by ``packwise pack`` back as one Arrow table (one row per pack).

    ``datasets.load_dataset("parquet", data_files=str(path / "packs-*.parquet"))`` reads the same files.

    Raises:
        ValueError: ``path`` is not a packwise packed dataset, or a shard is truncated/unreadable, holds
            another number of packs than ``metadata.json`` says, or lacks a column — naming the file.

    Example:
        >>> import tempfile, pyarrow as pa
        >>> d = tempfile.mkdtemp() + "/out"
        >>> _ = write_packed(d, [pa.table({"input_ids": [[1, 2], [3]]})], 1, {"capacity": 2})
        >>> load_packed(d).column("input_ids").to_pylist()
        [[1, 2], [3]]
    """
    meta = read_metadata(path)
    need = {"input_ids"} | ({"labels", "seq_lengths", "source_index"} if "tokens_packed" in meta else set())
    tables = []
    for f, shard in zip(packed_files(path), meta["shards"]):
        try:
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
        tables.append(t)
    try:
        return pa.concat_tables(tables)
    except pa.ArrowInvalid as e:
        raise ValueError(
            f"{path}: the shards' columns differ ({e}); the directory was modified — re-run packwise pack"
        ) from e
