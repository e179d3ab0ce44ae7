"""Pre-tokenized rows (``input_ids`` + ``labels``/``loss_mask`` + per-token columns) to :class:`Samples`,
row by row (JSONL, in-memory) or column by column (Parquet, HF directories)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..constants import IGNORE_INDEX
from ..io._read import BadRow, RawInput
from ._samples import RowErrors, Samples

RESERVED = ("input_ids", "labels", "loss_mask")


def tokens_from_rows(raw: RawInput, *, vocab_size: int | None, skip_bad_rows: bool) -> tuple[Samples, list]:
    """Pre-tokenized rows (``input_ids`` + optional ``labels``/``loss_mask`` + per-token columns)."""
    if raw.table is not None:
        return _tokens_from_table(raw, vocab_size=vocab_size, skip_bad_rows=skip_bad_rows)
    errors = RowErrors(skip_bad_rows, raw)
    per_sample, source = [], []
    extra: dict[str, list[np.ndarray]] = {}
    extra_names: list[str] | None = None
    for i, row in enumerate(raw.rows):
        if row is None:
            continue
        where = raw.locate(i)
        try:
            ids = _int_list(row.get("input_ids"), where, "input_ids")
            if ids.shape[0] == 0:
                raise BadRow(where, "input_ids", "is empty")
            _check_vocab(ids, vocab_size, where)
            labels = _labels(row, ids, where)
            names = sorted(k for k, v in row.items() if k not in RESERVED and _is_numeric_list(v))
            if extra_names is None:
                extra_names = names
            elif names != extra_names:
                missing = sorted(set(extra_names) ^ set(names))
                raise BadRow(where, missing[0], f"is a per-token column in some rows but not in this one ({names})")
            cols = {}
            for name in names:
                arr = np.asarray(row[name])
                if arr.shape[:1] != ids.shape:
                    raise BadRow(where, name, f"has {arr.shape[0]} values but input_ids has {ids.shape[0]}")
                cols[name] = arr
        except BadRow as e:
            errors.bad(i, e)
            continue
        per_sample.append((ids, labels))
        source.append(i)
        for name, arr in cols.items():
            extra.setdefault(name, []).append(arr)
    columns = {k: np.concatenate(v) for k, v in extra.items()}
    return Samples.from_arrays(per_sample, source, columns), errors.rows


def _int_list(value, where: str, name: str) -> np.ndarray:
    if not isinstance(value, (list, tuple, np.ndarray)):
        raise BadRow(where, name, f"is {type(value).__name__}, expected a list of token ids")
    arr = np.asarray(value)
    if arr.size and (arr.ndim != 1 or arr.dtype.kind not in "iu"):
        bad = next((v for v in value if isinstance(v, bool) or not isinstance(v, int)), value[0])
        raise BadRow(where, name, f"contains {bad!r}; expected integers")
    return arr.astype(np.int64).reshape(-1)


def _check_vocab(ids: np.ndarray, vocab_size: int | None, where: str) -> None:
    lo = 0 if vocab_size is None else vocab_size
    bad = np.flatnonzero((ids < 0) | (ids >= lo)) if vocab_size is not None else np.flatnonzero(ids < 0)
    if bad.size:
        p = int(bad[0])
        limit = f"[0, {vocab_size})" if vocab_size is not None else ">= 0"
        raise BadRow(
            where,
            "input_ids",
            f"has token id {int(ids[p])} at position {p} outside the vocabulary {limit}",
            "re-tokenize with the tokenizer you pass, or pass the tokenizer the ids came from",
        )


def _labels(row: dict, ids: np.ndarray, where: str) -> np.ndarray:
    if row.get("labels") is not None:
        labels = _int_list(row["labels"], where, "labels")
        if labels.shape != ids.shape:
            raise BadRow(where, "labels", f"has {labels.shape[0]} values but input_ids has {ids.shape[0]}")
        return labels
    if row.get("loss_mask") is not None:
        mask = np.asarray(row["loss_mask"])
        if mask.shape != ids.shape:
            raise BadRow(where, "loss_mask", f"has {mask.shape[0]} values but input_ids has {ids.shape[0]}")
        if mask.dtype.kind not in "biu" or not np.isin(mask, (0, 1)).all():
            raise BadRow(where, "loss_mask", "must hold only 0/1 or true/false")
        return np.where(mask.astype(bool), ids, IGNORE_INDEX)
    return ids.copy()


def _is_numeric_list(v) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, (int, float, bool)) for x in v[:8])


def _list_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Flat values and per-row lengths of a (large) list array; null rows have length 0."""
    lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    values = pc.list_flatten(arr).to_numpy(zero_copy_only=False)
    return values, lengths


def _is_list_of_numbers(t: pa.DataType) -> bool:
    return (pa.types.is_list(t) or pa.types.is_large_list(t)) and (
        pa.types.is_integer(t.value_type) or pa.types.is_floating(t.value_type) or pa.types.is_boolean(t.value_type)
    )


def _tokens_from_table(raw: RawInput, *, vocab_size: int | None, skip_bad_rows: bool) -> tuple[Samples, list]:
    table = raw.table
    errors = RowErrors(skip_bad_rows, raw)
    n = table.num_rows
    col = table.column("input_ids").combine_chunks()
    if not (pa.types.is_list(col.type) or pa.types.is_large_list(col.type)) or not pa.types.is_integer(
        col.type.value_type
    ):
        raise ValueError(f"{raw.name}: column 'input_ids' has type {col.type}, expected a list of integers")
    ids, lengths = _list_parts(col)
    ids = ids.astype(np.int64)
    starts = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    keep = np.ones(n, dtype=bool)

    def flag(rows: np.ndarray, make) -> None:
        for r in rows.tolist():
            if keep[r]:
                errors.bad(r, make(r))
                keep[r] = False

    nulls = col.is_null().to_numpy(zero_copy_only=False)
    flag(np.flatnonzero(nulls | (lengths == 0)), lambda r: BadRow(raw.locate(r), "input_ids", "is empty or null"))
    bad_tok = np.flatnonzero((ids < 0) | (ids >= (vocab_size if vocab_size is not None else np.iinfo(np.int64).max)))
    if bad_tok.size:
        rows = np.unique(np.searchsorted(starts, bad_tok, side="right") - 1)

        def vocab_error(r):
            seg = ids[starts[r] : starts[r + 1]]
            try:
                _check_vocab(seg, vocab_size, raw.locate(r))
            except BadRow as e:
                return e
            raise AssertionError  # pragma: no cover

        flag(rows, vocab_error)
    labels = ids.copy()
    for name in ("labels", "loss_mask"):
        if name in table.column_names:
            other = table.column(name).combine_chunks()
            if not _is_list_of_numbers(other.type):
                raise ValueError(f"{raw.name}: column {name!r} has type {other.type}, expected a list of numbers")
            values, other_len = _list_parts(other)
            present = ~other.is_null().to_numpy(zero_copy_only=False)  # a null row means "not given"
            other_len = np.where(present, other_len, lengths)
            mismatch = np.flatnonzero(other_len != lengths)
            flag(
                mismatch,
                lambda r, name=name, ol=other_len: BadRow(
                    raw.locate(r), name, f"has {ol[r]} values but input_ids has {lengths[r]}"
                ),
            )
            given = np.repeat(present & (other_len == lengths), lengths)
            aligned = _aligned(values, np.where(present, other_len, 0), lengths)
            if name == "labels":
                if values.dtype.kind not in "iu":
                    raise ValueError(f"{raw.name}: column 'labels' holds {values.dtype}, expected integers")
                labels = np.where(given, aligned.astype(np.int64), ids)
            else:
                labels = np.where(given & ~aligned.astype(bool), IGNORE_INDEX, ids)
            break
    columns = {}
    for name in table.column_names:
        if name in RESERVED or not _is_list_of_numbers(table.schema.field(name).type):
            continue
        values, col_len = _list_parts(table.column(name).combine_chunks())
        flag(
            np.flatnonzero(col_len != lengths),
            lambda r, name=name, cl=col_len: BadRow(
                raw.locate(r), name, f"has {cl[r]} values but input_ids has {lengths[r]}"
            ),
        )
        columns[name] = _aligned(values, col_len, lengths)
    token_keep = np.repeat(keep, lengths)
    kept_lengths = lengths[keep]
    offsets = np.zeros(kept_lengths.shape[0] + 1, dtype=np.int64)
    np.cumsum(kept_lengths, out=offsets[1:])
    samples = Samples(
        ids=ids[token_keep].astype(np.int32),
        labels=labels[token_keep].astype(np.int32),
        offsets=offsets,
        source=np.flatnonzero(keep).astype(np.int64),
        columns={k: v[token_keep] for k, v in columns.items()},
    )
    return samples, errors.rows


def _aligned(values: np.ndarray, value_lengths: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Per-token values laid out like input_ids; rows whose lengths differ are zero-filled (they are
    dropped as bad rows or replaced by the caller)."""
    if np.array_equal(value_lengths, lengths):
        return values
    out = np.zeros(int(lengths.sum()), dtype=values.dtype)
    ok = (value_lengths == lengths) & (value_lengths > 0)
    src = np.repeat(ok, value_lengths)
    dst = np.repeat(ok, lengths)
    out[dst] = values[src]
    return out
