"""Pre-tokenized rows read column by column (Parquet, HF directories): one vectorised pass per column, the
same rules and the same :class:`Samples` as the row-by-row path of ``_tokens.py``."""

from __future__ import annotations

from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..constants import IGNORE_INDEX
from ..files import BadRow, RawInput, is_nested_numeric, nested_values
from ._token_rules import (
    DROP_FIX,
    ID_LIMIT,
    PAD_MASK,
    RESERVED,
    TRL_MASKS,
    _ambiguous,
    _check_labels,
    _check_shifted,
    _check_some_loss,
    _check_vocab,
    _not_produced,
    real_span,
)
from ._types import RowErrors, Samples


def _list_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flat values, per-row lengths (null rows: 0) and per-row "has a null item" of a (large) list array."""
    import pyarrow.compute as pc  # 0.1 s of import: only pre-tokenized tables need it

    lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    flat = pc.list_flatten(arr)
    item_null = np.zeros(lengths.shape[0], dtype=bool)
    if flat.null_count:
        starts = np.concatenate([[0], np.cumsum(lengths)])
        nulls = np.flatnonzero(flat.is_null().to_numpy(zero_copy_only=False))
        item_null[np.searchsorted(starts, nulls, side="right") - 1] = True
        flat = pc.fill_null(flat, 0)
    return flat.to_numpy(zero_copy_only=False), lengths, item_null


def _is_list_of_numbers(t: pa.DataType) -> bool:
    return (pa.types.is_list(t) or pa.types.is_large_list(t)) and (
        pa.types.is_integer(t.value_type) or pa.types.is_floating(t.value_type) or pa.types.is_boolean(t.value_type)
    )


def _tokens_from_table(raw: RawInput, *, vocab_size: int | None, skip_bad_rows: bool) -> tuple[Samples, list]:
    table = cast(pa.Table, raw.table)  # tokenize_tokens calls this only when raw.table is set
    errors = RowErrors(skip_bad_rows, raw)
    n = table.num_rows
    col = table.column("input_ids").combine_chunks()
    if not (pa.types.is_list(col.type) or pa.types.is_large_list(col.type)) or not pa.types.is_integer(
        col.type.value_type
    ):
        raise ValueError(f"{raw.name}: column 'input_ids' has type {col.type}, expected a list of integers")
    ids, lengths, id_null = _list_parts(col)
    if ids.dtype == np.uint64 and ids.size and int(ids.max()) >= 2**63:
        ids = np.minimum(ids, 2**63 - 1)  # out of range anyway; keep the comparison below exact
    ids = ids.astype(np.int64)
    starts = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    keep = np.ones(n, dtype=bool)

    def flag(rows: np.ndarray, make) -> None:
        for r in rows.tolist():
            if keep[r]:
                errors.bad(r, make(r))
                keep[r] = False

    def row_of(tokens: np.ndarray) -> np.ndarray:
        return np.unique(np.searchsorted(starts, tokens, side="right") - 1)

    def segment_error(check, values: np.ndarray):
        return _segment_error(check, values, starts, raw)

    nulls = col.is_null().to_numpy(zero_copy_only=False)
    flag(np.flatnonzero(nulls | (lengths == 0)), lambda r: BadRow(raw.locate(r), "input_ids", "is empty or null"))
    flag(np.flatnonzero(id_null), lambda r: BadRow(raw.locate(r), "input_ids", "holds a null token id"))
    limit = ID_LIMIT if vocab_size is None else vocab_size
    flag(
        row_of(np.flatnonzero((ids < 0) | (ids >= limit))),
        segment_error(lambda s, w: _check_vocab(s, vocab_size, w), ids),
    )
    present = {name: name in table.column_names for name in ("labels", "loss_mask", *TRL_MASKS)}
    if present["labels"] and present["loss_mask"]:
        raise ValueError(f"{raw.name}: has both 'labels' and 'loss_mask' columns; keep one of them (labels say more)")
    masks = [k for k in TRL_MASKS if present[k]]
    given = given_names = [k for k in ("labels", "loss_mask") if present[k]]
    if masks and given:
        field, problem, fix = _ambiguous(masks, given)
        raise ValueError(f"{raw.name}: column {field!r} {problem}; {fix}")
    labels = ids.copy()
    gave = np.zeros(n, dtype=bool)  # rows whose labels/loss_mask/TRL masks are given (not null)
    for name in (k for k, v in present.items() if v):
        other = table.column(name).combine_chunks()
        if not _is_list_of_numbers(other.type):
            raise ValueError(f"{raw.name}: column {name!r} has type {other.type}, expected a list of numbers")
        values, other_len, other_null = _list_parts(other)
        given_rows = ~other.is_null().to_numpy(zero_copy_only=False)  # a null row means "not given"
        gave |= given_rows
        other_len = np.where(given_rows, other_len, lengths)
        flag(
            np.flatnonzero(other_len != lengths),
            lambda r, name=name, ol=other_len: _length_error(raw, r, name, ol[r], lengths[r]),
        )
        flag(np.flatnonzero(other_null), lambda r, name=name: BadRow(raw.locate(r), name, "holds a null value"))
        given_at = np.repeat(given_rows & (other_len == lengths), lengths)  # per token: the row gave the column
        aligned = _aligned(values, np.where(given_rows, other_len, 0), lengths)
        if name == "labels":
            if values.dtype.kind not in "iu":
                raise ValueError(f"{raw.name}: column 'labels' holds {values.dtype}, expected integers")
            labels = np.where(given_at, aligned.astype(np.int64), ids)
            flag(
                row_of(np.flatnonzero((labels != IGNORE_INDEX) & ((labels < 0) | (labels >= ID_LIMIT)))),
                segment_error(_check_labels, labels),
            )
            _flag_shifted(ids, labels, starts, np.repeat(given_rows, lengths), raw, flag, keep)
        else:
            bad = ~np.isin(aligned, (0, 1)) & given_at
            flag(
                row_of(np.flatnonzero(bad)),
                lambda r, name=name: BadRow(raw.locate(r), name, "must hold only 0/1 or true/false"),
            )
            labels = np.where(given_at & ~aligned.astype(bool), IGNORE_INDEX, labels)  # several TRL masks: AND
    if gave.any():
        _flag_no_loss(labels, starts, lengths, gave, raw, flag, masks or given_names)
    columns = {}
    for name in table.column_names:
        if name in RESERVED:
            continue
        if is_nested_numeric(table.schema.field(name).type):
            _not_produced([name], raw.name)
            columns[name] = _nested_column(table.column(name).combine_chunks(), name, lengths, raw, flag)
            continue
        if not _is_list_of_numbers(table.schema.field(name).type):
            values = table.column(name)
            problem = (
                f"is a column of {values.type}, not flat per-token numbers (one per input id), so it would be dropped"
            )
            flag(
                np.flatnonzero(~values.is_null().to_numpy(zero_copy_only=False)),
                lambda r, name=name, problem=problem: BadRow(raw.locate(r), name, problem, DROP_FIX.format(name=name)),
            )
            continue
        _not_produced([name], raw.name)  # the whole file's column: not one bad row
        values, col_len, col_null = _list_parts(table.column(name).combine_chunks())
        flag(
            np.flatnonzero(col_len != lengths),
            lambda r, name=name, cl=col_len: _length_error(raw, r, name, cl[r], lengths[r]),
        )
        flag(np.flatnonzero(col_null), lambda r, name=name: BadRow(raw.locate(r), name, "holds a null value"))
        columns[name] = _aligned(values, col_len, lengths)
    real = None
    if PAD_MASK in columns:
        real = _strip_padding(columns.pop(PAD_MASK), lengths, starts, flag, raw)
    token_keep = np.repeat(keep, lengths)
    kept_lengths = lengths[keep]
    pads = 0
    if real is not None:
        token_keep &= real
        real_lengths = np.bincount(np.repeat(np.arange(n), lengths)[real], minlength=n)
        pads = int((lengths - real_lengths)[keep].sum())
        kept_lengths = real_lengths[keep]
    offsets = np.zeros(kept_lengths.shape[0] + 1, dtype=np.int64)
    np.cumsum(kept_lengths, out=offsets[1:])
    samples = Samples(
        ids=ids[token_keep].astype(np.int32),
        labels=labels[token_keep].astype(np.int32),
        offsets=offsets,
        source=np.flatnonzero(keep).astype(np.int64),
        columns={k: v[token_keep] for k, v in columns.items()},
        pad_tokens_removed=pads,
    )
    return samples, errors.rows


def _strip_padding(mask: np.ndarray, lengths: np.ndarray, starts: np.ndarray, flag, raw: RawInput) -> np.ndarray:
    """``(T,)`` bool real tokens of every row's ``attention_mask`` (flat, laid out like input_ids); rows whose
    mask is not one contiguous run of 1s are flagged (as :func:`real_span` words it)."""
    n = lengths.shape[0]
    row = np.repeat(np.arange(n), lengths)
    ones = mask == 1
    bad = np.zeros(n, dtype=bool)
    bad[row[~np.isin(mask, (0, 1))]] = True
    count = np.bincount(row[ones], minlength=n)
    pos = np.arange(mask.shape[0]) - starts[:-1][row]
    rows_with, first_at = np.unique(row[ones], return_index=True)
    span = np.zeros(n, dtype=np.int64)
    pos_ones = pos[ones]
    span[rows_with] = pos_ones[first_at + count[rows_with] - 1] - pos_ones[first_at] + 1
    bad |= (count == 0) | (span != count)
    bad &= lengths > 0

    flag(np.flatnonzero(bad), _segment_error(real_span, mask, starts, raw))
    return ones


def _segment_error(check, values: np.ndarray, starts: np.ndarray, raw: RawInput):
    """``make(row)``: the :class:`BadRow` that the per-row ``check(segment, where)`` raises for a row the
    vectorised test flagged (the row path's own message, so both read paths word an error alike)."""

    def make(r):
        try:
            check(values[starts[r] : starts[r + 1]], raw.locate(r))
        except BadRow as e:
            return e
        raise AssertionError  # pragma: no cover

    return make


def _length_error(raw: RawInput, row: int, name: str, got: object, want: object) -> BadRow:  # counts, printed
    return BadRow(raw.locate(row), name, f"has {got} values but input_ids has {want}")


def _aligned(values: np.ndarray, value_lengths: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Per-token values laid out like input_ids; rows whose lengths differ are zero-filled (they are
    dropped as bad rows or replaced by the caller)."""
    if np.array_equal(value_lengths, lengths):
        return values
    out = np.zeros((int(lengths.sum()), *values.shape[1:]), dtype=values.dtype)
    ok = (value_lengths == lengths) & (value_lengths > 0)
    src = np.repeat(ok, value_lengths)
    dst = np.repeat(ok, lengths)
    out[dst] = values[src]
    return out


def _flag_shifted(ids, labels, starts, given, raw: RawInput, flag, keep) -> None:
    """Flag the rows whose given ``labels`` look Megatron-shifted (:func:`_check_shifted`, row by row on the
    rows with a target that is not its own token: HF labels never get that far)."""
    odd = np.flatnonzero(given & (labels != IGNORE_INDEX) & (labels != ids))
    rows = np.unique(np.searchsorted(starts, odd, side="right") - 1)
    bad = {}
    for r in rows.tolist():
        if not keep[r]:
            continue
        a, b = int(starts[r]), int(starts[r + 1])
        try:
            _check_shifted(ids[a:b], labels[a:b], raw.locate(r))
        except BadRow as e:
            bad[r] = e
    flag(np.asarray(sorted(bad), dtype=np.int64), bad.__getitem__)


def _flag_no_loss(labels, starts, lengths, gave, raw: RawInput, flag, names) -> None:
    """Flag the rows whose given labels/masks leave no target after the row's first token."""
    n = lengths.shape[0]
    target = labels != IGNORE_INDEX
    firsts = starts[:-1][lengths > 0]
    target[firsts] = False
    count = np.bincount(np.repeat(np.arange(n), lengths)[target], minlength=n)
    field = names[0]

    def make(r):
        try:
            _check_some_loss(labels[starts[r] : starts[r + 1]], raw.locate(r), field)
        except BadRow as e:
            return e
        raise AssertionError  # pragma: no cover

    flag(np.flatnonzero(gave & (count == 0) & (lengths > 0)), make)


def _nested_column(col: pa.Array, name: str, lengths: np.ndarray, raw: RawInput, flag) -> np.ndarray:
    """A per-token column of lists (``[T, k, ...]``: teacher top-k log-probs, ...) laid out like input_ids as
    ``(T, k, ...)``; rows of another length, or with a token whose item has another shape than the first
    row's first token (ragged, null, empty), are flagged naming both shapes."""
    col_len = pc.fill_null(pc.list_value_length(col), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    flag(np.flatnonzero(col_len != lengths), lambda r: _length_error(raw, r, name, col_len[r], lengths[r]))
    items = pc.list_flatten(col)
    values, shape, bad = nested_values(items)
    if values is None:
        starts = np.concatenate([[0], np.cumsum(col_len)])
        first_bad: dict[int, int] = {}  # row -> its first bad token
        for t in np.flatnonzero(bad).tolist():
            first_bad.setdefault(int(np.searchsorted(starts, t, side="right") - 1), t)

        def make(r):
            t = first_bad[r]
            got = nested_values(items.slice(t, 1))[1] if items[t].is_valid else "null"
            want = "empty" if 0 in shape else f"{list(shape)} (the first row's)"
            return BadRow(
                raw.locate(r), name, f"has per-token shape {got if got == 'null' else list(got)} at token "
                f"{t - int(starts[r])} but every token needs the same non-empty shape, here {want}",
                "give every token of every row the same [k, ...] shape (pad the short ones) or drop the column",
            )  # fmt: skip

        flag(np.asarray(sorted(first_bad), dtype=np.int64), make)
        good = np.ones(col_len.shape[0], dtype=bool)
        good[list(first_bad)] = False
        if not good.any() or 0 in shape:
            return np.zeros((int(lengths.sum()), *[max(k, 1) for k in shape]), dtype=np.float32)
        col = col.filter(pa.array(good))
        col_len = np.where(good, col_len, 0)
        values, _, _ = nested_values(pc.list_flatten(col))
    return _aligned(cast(np.ndarray, values), col_len, lengths)  # the bad rows are filtered out: values are set
