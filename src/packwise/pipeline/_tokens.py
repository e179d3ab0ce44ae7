"""Pre-tokenized rows (``input_ids`` + ``labels``/``loss_mask`` + per-token columns) to :class:`Samples`,
row by row (JSONL, in-memory) or column by column (Parquet, HF directories).

Ids and labels are stored as int32: a token id must be in ``[0, 2**31)`` (``[0, vocab)`` with a
tokenizer) and a label must be -100 or a token id — anything else is a bad row, never a silent wrap.

Padded rows: an ``attention_mask`` column says which tokens are real (HF convention). Its 1s must form one
contiguous run (left padding, right padding or both); the 0s around it are padding and are stripped on read
(counted as ``pad_tokens_removed`` in the report), and the column itself is not carried into the packs (it
would be all ones). A mask with 0s *between* real tokens is not padding and is a bad row — unpadded, the
model would have seen exactly the run of 1s, so that is what gets packed; anything else would be a guess.
``PackedDataCollator`` applies the same rule (:func:`real_span`).

TRL's loss masks (``completion_mask``, ``assistant_masks``: :data:`TRL_MASKS`) are read as ``loss_mask`` (1 =
the token is a target; two of them: a target in both, as TRL builds labels) and not carried into the packs; a
row that also has ``labels`` or ``loss_mask`` is refused as ambiguous. ``PackedDataCollator`` does the same.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..constants import IGNORE_INDEX
from ..io._read import BadRow, RawInput
from ._types import RowErrors, Samples

#: TRL's tokenized loss masks, read as ``loss_mask`` (1 = the token is a target; several in one row: a target in
#: all of them): ``completion_mask`` (prompt-completion data) and ``assistant_masks`` (``assistant_only_loss``).
#: Source: trl 1.16 ``SFTTrainer._prepare_dataset`` (builds labels from them, then drops them).
TRL_MASKS = ("completion_mask", "assistant_masks")
RESERVED = ("input_ids", "labels", "loss_mask", *TRL_MASKS)
#: Columns packwise writes; an input holding them is probably packed already and would be corrupted.
OUTPUT_COLUMNS = (
    "seq_lengths", "source_index", "image_paths", "image_sha256", "image_grid_thw", "images_per_sequence",
    "audio_paths", "audio_frames", "audios_per_sequence", "video_paths", "video_grid_thw", "second_per_grid_ts",
    "videos_per_sequence",
)  # fmt: skip
ID_LIMIT = 2**31
#: HF's padding column: 1 = real token, 0 = padding (stripped on read, see the module docstring).
PAD_MASK = "attention_mask"


def real_span(mask, where: str, field: str = PAD_MASK) -> tuple[int, int]:
    """``(start, end)`` of the one contiguous run of 1s of an ``attention_mask`` (the real tokens).

    Raises:
        BadRow: values other than 0/1, no 1 at all, or 0s between 1s (not left/right padding).

    Example:
        >>> real_span([0, 0, 1, 1, 1], "row 0"), real_span([1, 1, 0], "row 1")
        ((2, 5), (0, 2))
    """
    m = np.asarray(mask).reshape(-1)
    if m.dtype.kind not in "biuf" or not np.isin(m, (0, 1)).all():
        raise BadRow(where, field, "must hold only 0/1 (1 = real token, 0 = padding)", "fix or drop the column")
    ones = np.flatnonzero(m)
    if ones.size == 0:
        raise BadRow(where, field, "is all zeros (no real token)", "drop the row or fix its attention_mask")
    start, end = int(ones[0]), int(ones[-1]) + 1
    if ones.size != end - start:
        gap = int(np.flatnonzero(m[start:end] == 0)[0]) + start
        raise BadRow(
            where, field, f"has a 0 at position {gap} between real tokens ({start}..{end - 1}): not left or right "
            "padding, so which tokens are real is ambiguous",
            "remove the masked tokens yourself (packwise strips only contiguous padding) or drop the column",
        )  # fmt: skip
    return start, end


def _reserved(names, where: str) -> None:
    clash = sorted(set(names) & set(OUTPUT_COLUMNS))
    if clash:
        raise BadRow(
            where, clash[0], "is a column packwise writes (is this already packed data?)",
            "pack the original samples, or rename/drop the column",
        )  # fmt: skip


def tokens_from_rows(
    raw: RawInput, *, vocab_size: int | None, skip_bad_rows: bool, extra_names: list[str] | None = None
) -> tuple[Samples, list]:
    """Pre-tokenized rows (``input_ids`` + optional ``labels`` or ``loss_mask`` + per-token columns).

    Every row must carry the per-token columns of the first good row (``extra_names`` when given: the Ray
    engine passes the first good row of the whole input to the pieces after the first).
    """
    if raw.table is not None:
        _reserved(raw.table.column_names, raw.name)
        return _tokens_from_table(raw, vocab_size=vocab_size, skip_bad_rows=skip_bad_rows)
    errors = RowErrors(skip_bad_rows, raw)
    per_sample, source = [], []
    extra: dict[str, list[np.ndarray]] = {}
    pads = 0
    for i, row in enumerate(raw.rows):
        if row is None:
            continue
        where = raw.locate(i)
        try:
            _reserved(row.keys(), where)
            if row.get("input_ids") is None and (row.get("messages") is not None or row.get("prompt") is not None):
                other = "messages" if row.get("messages") is not None else "prompt"
                raise BadRow(
                    where,
                    "input_ids",
                    f"is missing but the row has {other!r}: one input kind per dataset (the first row's)",
                )
            ids = _int_list(row.get("input_ids"), where, "input_ids")
            if ids.shape[0] == 0:
                raise BadRow(where, "input_ids", "is empty")
            labels = _labels(row, ids, where)
            names = sorted(k for k, v in row.items() if k not in RESERVED and _is_numeric_list(v))
            if extra_names is None:
                extra_names = names
            elif names != extra_names:
                _column_mismatch(names, extra_names, where)
            cols = {name: _column(row[name], ids.shape[0], where, name) for name in names}
            removed = 0
            if PAD_MASK in cols:
                a, b = real_span(cols.pop(PAD_MASK), where)
                removed = ids.shape[0] - (b - a)
                ids, labels, cols = ids[a:b], labels[a:b], {k: v[a:b] for k, v in cols.items()}
            _check_vocab(ids, vocab_size, where)
        except BadRow as e:
            errors.bad(i, e)
            continue
        pads += removed
        per_sample.append((ids, labels))
        source.append(i)
        for name, arr in cols.items():
            extra.setdefault(name, []).append(arr)
    columns = {k: np.concatenate(v) for k, v in extra.items()}
    samples = Samples.from_arrays(per_sample, source, columns)
    samples.pad_tokens_removed = pads
    return samples, errors.rows


def _column_mismatch(names: list[str], first: list[str], where: str):
    """Every row carries the per-token columns of the first good row."""
    extra, missing = sorted(set(names) - set(first)), sorted(set(first) - set(names))
    seen = f"(first good row: {first}, this row: {names}; every row needs the same per-token columns)"
    if missing:
        raise BadRow(
            where,
            missing[0],
            f"is a per-token column of the first good row but missing, null or not numbers here {seen}",
        )
    raise BadRow(where, extra[0], f"is a per-token column here but not in the first good row {seen}")


def _int_list(value, where: str, name: str) -> np.ndarray:
    if value is None:
        raise BadRow(where, name, "is missing or null, expected a list of token ids")
    if not isinstance(value, (list, tuple, np.ndarray)):
        raise BadRow(where, name, f"is {type(value).__name__}, expected a list of token ids")
    try:
        arr = np.asarray(value)
    except (OverflowError, ValueError):
        arr = np.asarray(value, dtype=object)
    if arr.size and (arr.ndim != 1 or arr.dtype.kind not in "iu"):
        flat = list(value) if arr.ndim == 1 else [value]
        missing = object()
        bad = next((v for v in flat if isinstance(v, bool) or not isinstance(v, int)), missing)
        if bad is missing:  # Python ints too large for int64
            bad = next(v for v in flat if not -(2**63) <= v < 2**63)
            raise BadRow(where, name, f"contains {bad}, outside int32 token ids [0, {ID_LIMIT})")
        if bad is None:
            raise BadRow(where, name, "holds a null token id")
        raise BadRow(where, name, f"contains {bad!r}; expected a flat list of integers")
    return arr.astype(np.int64).reshape(-1)


def _check_vocab(ids: np.ndarray, vocab_size: int | None, where: str) -> None:
    limit = ID_LIMIT if vocab_size is None else vocab_size
    bad = np.flatnonzero((ids < 0) | (ids >= limit))
    if bad.size:
        p = int(bad[0])
        what = f"the vocabulary [0, {vocab_size})" if vocab_size is not None else f"int32 token ids [0, {limit})"
        raise BadRow(
            where, "input_ids", f"has token id {int(ids[p])} at position {p} outside {what}",
            "re-tokenize with the tokenizer you pass, or pass the tokenizer the ids came from",
        )  # fmt: skip


def _check_labels(labels: np.ndarray, where: str) -> None:
    bad = np.flatnonzero((labels != IGNORE_INDEX) & ((labels < 0) | (labels >= ID_LIMIT)))
    if bad.size:
        p = int(bad[0])
        raise BadRow(
            where, "labels", f"has {int(labels[p])} at position {p}, neither {IGNORE_INDEX} (no loss) nor a token id",
            f"use {IGNORE_INDEX} for tokens without loss",
        )  # fmt: skip


def _ambiguous(masks: list[str], given: list[str]) -> tuple[str, str, str]:
    """``(field, problem, fix)`` for a row with TRL mask columns and ``labels``/``loss_mask``."""
    return (
        masks[0],
        f"is given together with {given[0]!r}: which tokens are targets is ambiguous",
        f"keep one of them ({given[0]!r}, or {' + '.join(masks)} read as loss_mask: 1 = target)",
    )


def _labels(row: dict, ids: np.ndarray, where: str) -> np.ndarray:
    if row.get("labels") is not None and row.get("loss_mask") is not None:
        raise BadRow(where, "loss_mask", "is given together with 'labels'", "keep one of them (labels say more)")
    masks = [k for k in TRL_MASKS if row.get(k) is not None]
    given = [k for k in ("labels", "loss_mask") if row.get(k) is not None]
    if masks and given:
        raise BadRow(where, *_ambiguous(masks, given))
    if row.get("labels") is not None:
        labels = _int_list(row["labels"], where, "labels")
        if labels.shape != ids.shape:
            raise BadRow(where, "labels", f"has {labels.shape[0]} values but input_ids has {ids.shape[0]}")
        _check_labels(labels, where)
        return labels
    keep = np.ones(ids.shape[0], dtype=bool)
    for name in masks or given:
        keep &= _mask(row[name], ids, where, name)
    return np.where(keep, ids, IGNORE_INDEX)


def _mask(value, ids: np.ndarray, where: str, name: str) -> np.ndarray:
    """A 0/1 per-token loss mask (``loss_mask`` or a TRL mask) as ``(L,)`` bool, 1 = the token is a target."""
    if not isinstance(value, (list, tuple)):
        raise BadRow(where, name, f"is {type(value).__name__}, expected a list of 0/1")
    mask = np.asarray(value, dtype=object)
    if mask.ndim != 1:
        raise BadRow(where, name, "is not a flat list of 0/1")
    if mask.shape != ids.shape:
        raise BadRow(where, name, f"has {mask.shape[0]} values but input_ids has {ids.shape[0]}")
    if not all(v in (0, 1) and not isinstance(v, float) for v in value):
        raise BadRow(where, name, "must hold only 0/1 or true/false")
    return mask.astype(bool)


def _column(value: list, n: int, where: str, name: str) -> np.ndarray:
    try:
        arr = np.asarray(value)
    except (OverflowError, ValueError) as e:
        raise BadRow(where, name, f"cannot be a numeric array ({e})") from None
    if arr.dtype.kind not in "biuf":
        raise BadRow(where, name, f"mixes types ({arr.dtype}); a per-token column holds numbers or booleans")
    if arr.shape[:1] != (n,):
        raise BadRow(where, name, f"has {arr.shape[0]} values but input_ids has {n}")
    return arr


def _is_numeric_list(v) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, (int, float, bool)) for x in v[:8])


def _list_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flat values, per-row lengths (null rows: 0) and per-row "has a null item" of a (large) list array."""
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
    table = raw.table
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
        def make(r):
            try:
                check(values[starts[r] : starts[r + 1]], raw.locate(r))
            except BadRow as e:
                return e
            raise AssertionError  # pragma: no cover

        return make

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
    given = [k for k in ("labels", "loss_mask") if present[k]]
    if masks and given:
        field, problem, fix = _ambiguous(masks, given)
        raise ValueError(f"{raw.name}: column {field!r} {problem}; {fix}")
    labels = ids.copy()
    for name in (k for k, v in present.items() if v):
        other = table.column(name).combine_chunks()
        if not _is_list_of_numbers(other.type):
            raise ValueError(f"{raw.name}: column {name!r} has type {other.type}, expected a list of numbers")
        values, other_len, other_null = _list_parts(other)
        given_rows = ~other.is_null().to_numpy(zero_copy_only=False)  # a null row means "not given"
        other_len = np.where(given_rows, other_len, lengths)
        flag(
            np.flatnonzero(other_len != lengths),
            lambda r, name=name, ol=other_len: _length_error(raw, r, name, ol[r], lengths[r]),
        )
        flag(np.flatnonzero(other_null), lambda r, name=name: BadRow(raw.locate(r), name, "holds a null value"))
        given = np.repeat(given_rows & (other_len == lengths), lengths)
        aligned = _aligned(values, np.where(given_rows, other_len, 0), lengths)
        if name == "labels":
            if values.dtype.kind not in "iu":
                raise ValueError(f"{raw.name}: column 'labels' holds {values.dtype}, expected integers")
            labels = np.where(given, aligned.astype(np.int64), ids)
            flag(
                row_of(np.flatnonzero((labels != IGNORE_INDEX) & ((labels < 0) | (labels >= ID_LIMIT)))),
                segment_error(_check_labels, labels),
            )
        else:
            bad = ~np.isin(aligned, (0, 1)) & given
            flag(
                row_of(np.flatnonzero(bad)),
                lambda r, name=name: BadRow(raw.locate(r), name, "must hold only 0/1 or true/false"),
            )
            labels = np.where(given & ~aligned.astype(bool), IGNORE_INDEX, labels)  # several TRL masks: AND
    columns = {}
    for name in table.column_names:
        if name in RESERVED or not _is_list_of_numbers(table.schema.field(name).type):
            continue
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

    def make(r):
        try:
            real_span(mask[starts[r] : starts[r + 1]], raw.locate(r))
        except BadRow as e:
            return e
        raise AssertionError  # pragma: no cover

    flag(np.flatnonzero(bad), make)
    return ones


def _length_error(raw: RawInput, row: int, name: str, got: int, want: int) -> BadRow:
    return BadRow(raw.locate(row), name, f"has {got} values but input_ids has {want}")


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
