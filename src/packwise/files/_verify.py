"""Checks of a packed output as the loaders read it: shard hashes (``metadata.json``, or the manifest when
``metadata.json`` lost them), column types and per-row lengths. Split from ``_write.py`` (the writer)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

from ._manifest import MANIFEST, read_manifest, sha256_file  # noqa: F401  (sha256_file: re-exported)
from ._owned import METADATA


def shard_records(path, shards: list[dict]) -> list[dict]:
    """``metadata.json``'s shard entries; one without a SHA-256 (stripped, or written before packwise recorded
    them) takes the size and SHA-256 that ``.packwise-manifest.json`` records for its file, when it has one,
    marked ``"recorded_in"``: stripping hashes from ``metadata.json`` does not switch the check off.

    Raises:
        ValueError: the manifest is not packwise's (:func:`._manifest.read_manifest`).
    """
    if all("sha256" in s for s in shards):
        return shards
    records = read_manifest(path) or {}
    out = []
    for s in shards:
        r = records.get(s["file"]) if "sha256" not in s else None
        out.append({**s, "bytes": r["bytes"], "sha256": r["sha256"], "recorded_in": MANIFEST} if r else s)
    return out


def check_checksum(f: Path, shard: dict, size: int, digest: str) -> None:
    """Refuse a shard whose size or SHA-256 is not the one ``metadata.json`` records (no record: accepted,
    an output written before packwise recorded them).

    Raises:
        ValueError: naming the shard, the expected and actual hash, and the fix.
    """
    want = shard.get("sha256")
    if want is None or (digest == want and size == shard.get("bytes", size)):
        return
    raise ValueError(
        f"{f}: its SHA-256 is {digest} ({size} bytes) but {shard.get('recorded_in', METADATA)} records {want} "
        f"({shard.get('bytes')} "
        "bytes); the shard was changed after packwise wrote it — re-run packwise pack (or pass "
        "verify_checksums=False to read it anyway)"
    )


#: Columns with one entry per sequence or per media item, not per token (see integrations/_torch_data.py).
_PER_SEQUENCE = ("seq_lengths", "source_index", "second_per_grid_ts")
_MEDIA_PREFIXES = ("image_", "images_", "audio_", "audios_", "video_", "videos_")


#: Columns of a packed shard that hold lists of integers (token ids, labels, sequence lengths and sources).
INT_LIST_COLUMNS = ("input_ids", "labels", "seq_lengths", "source_index")


def check_column_types(schema: pa.Schema, where) -> None:
    """Refuse a packed shard whose id, label or sequence columns are not lists of integers (say ``input_ids``
    rewritten as ``list<double>``): loading it would hand floats to a model. Checked whether or not hashes are.

    Raises:
        ValueError: naming ``where`` (the file), the column, its type and the fix.
    """
    for name in INT_LIST_COLUMNS:
        if name not in schema.names:
            continue
        t = schema.field(name).type
        if not (pa.types.is_list(t) or pa.types.is_large_list(t)) or not pa.types.is_integer(t.value_type):
            raise ValueError(
                f"{where}: column {name!r} has type {t}, expected a list of integers; the shard was modified — "
                "re-run packwise pack"
            )


def check_rows(table: pa.Table, where) -> None:
    """Refuse a packed shard whose rows do not hold together (vectorised over the shard, pyarrow + numpy):
    every per-token list column (``labels``, ...) has as many entries as ``input_ids`` in each row, and
    ``seq_lengths`` (when present) are >= 1 and sum to the row's ``input_ids`` length, with one
    ``source_index`` per sequence; the columns have their types (:func:`check_column_types`).

    Raises:
        ValueError: naming ``where`` (the file), the first bad row and the column.
    """
    import pyarrow.compute as pc

    check_column_types(table.schema, where)

    def lengths(name: str) -> np.ndarray:
        col = table.column(name).combine_chunks()
        return pc.fill_null(pc.list_value_length(col), -1).to_numpy(zero_copy_only=False)

    def bad(name: str, mask: np.ndarray, what: str | Callable[[int], str]) -> None:
        if mask.any():
            row = int(np.flatnonzero(mask)[0])
            raise ValueError(
                f"{where} row {row}: column {name!r} {what(row) if callable(what) else what}; the shard was "
                "modified — re-run packwise pack"
            )

    n = lengths("input_ids")
    bad("input_ids", n < 0, "is null")
    for name in table.column_names:
        if name == "input_ids" or name in _PER_SEQUENCE or name.startswith(_MEDIA_PREFIXES):
            continue
        if not (
            pa.types.is_list(table.schema.field(name).type) or pa.types.is_large_list(table.schema.field(name).type)
        ):
            continue
        m = lengths(name)
        bad(name, m != n, lambda r: f"has {m[r]} entries but input_ids has {n[r]}")  # noqa: B023 (called at once)
    if "seq_lengths" not in table.column_names:
        return
    col = table.column("seq_lengths").combine_chunks()
    k = lengths("seq_lengths")
    bad("seq_lengths", k < 0, "is null")
    values = pc.list_flatten(col).to_numpy(zero_copy_only=False).astype(np.int64)
    parents = pc.list_parent_indices(col).to_numpy(zero_copy_only=False)
    bad("seq_lengths", np.bincount(parents, weights=values < 1, minlength=len(n)) > 0, "holds a length below 1")
    sums = np.bincount(parents, weights=values, minlength=len(n)).astype(np.int64)
    bad("seq_lengths", sums != n, lambda r: f"sums to {sums[r]} but input_ids has {n[r]} tokens")
    if "source_index" in table.column_names:
        src = lengths("source_index")
        bad("source_index", src != k, lambda r: f"has {src[r]} entries but seq_lengths has {k[r]} sequences")
