"""Pre-tokenized rows (``input_ids`` + ``labels``/``loss_mask`` + per-token columns) to :class:`Samples`,
row by row (JSONL, in-memory; here) or column by column (Parquet, HF directories; ``_tokens_table.py``), under the
same rules (``_token_rules.py``).

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

from typing import cast

import numpy as np

from ..constants import IGNORE_INDEX
from ..files import BadRow, RawInput
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
    _is_numeric_list,
    _not_per_token,
    _not_produced,
    _reserved,
    real_span,
)
from ._tokens_table import _tokens_from_table
from ._types import RowErrors, Samples


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
    rows = cast(list, raw.rows)  # a RawInput without a table holds rows (RawInput.num_rows raises on neither)
    shapes: dict[str, tuple] = {}  # the per-token shape of every column, from the first good row
    for i, row in enumerate(rows):
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
            for name, value in row.items():
                if value is not None and name not in RESERVED and not _is_numeric_list(value):
                    raise BadRow(where, name, _not_per_token(value), DROP_FIX.format(name=name))
            names = sorted(k for k, v in row.items() if k not in RESERVED and _is_numeric_list(v))
            _not_produced(names, where)
            if extra_names is None:
                extra_names = names
            elif names != extra_names:
                _column_mismatch(names, extra_names, where)
            cols = {name: _column(row[name], ids.shape[0], where, name, shapes.get(name)) for name in names}
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
        shapes = shapes or {name: arr.shape[1:] for name, arr in cols.items()}
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
    if arr.dtype.kind in "iu" and isinstance(value, list) and bool in map(type, value):  # [true, 2] is not [1, 2]
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
        _check_shifted(ids, labels, where)
        _check_some_loss(labels, where, "labels")
        return labels
    keep = np.ones(ids.shape[0], dtype=bool)
    for name in masks or given:
        keep &= _mask(row[name], ids, where, name)
    labels = np.where(keep, ids, IGNORE_INDEX)
    if masks or given:
        _check_some_loss(labels, where, (masks or given)[0])
    return labels


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


def _column(value: list, n: int, where: str, name: str, shape: tuple | None) -> np.ndarray:
    """A per-token column ``(n, *shape)``: ``shape`` is the first good row's per-token shape (None: this is it)."""
    try:
        arr = np.asarray(value)
    except (OverflowError, ValueError) as e:
        if "inhomogeneous" in str(e):
            raise BadRow(
                where, name, "is ragged: its per-token lists differ in length (one [k, ...] list per token, the same "
                "k for every token of every row)", DROP_FIX.format(name=name),
            ) from None  # fmt: skip
        raise BadRow(where, name, f"cannot be a numeric array ({e})") from None
    if arr.dtype.kind not in "biuf":
        raise BadRow(where, name, f"mixes types ({arr.dtype}); a per-token column holds numbers or booleans")
    if arr.shape[:1] != (n,):
        raise BadRow(where, name, f"has {arr.shape[0]} values but input_ids has {n}")
    if shape is not None and arr.shape[1:] != shape:
        raise BadRow(
            where, name, f"has per-token shape {list(arr.shape[1:])} but the first good row's is {list(shape)}",
            "give every row the same per-token shape (pad the short ones) or drop the column",
        )  # fmt: skip
    return arr
