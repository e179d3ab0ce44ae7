"""Per-token columns with a trailing shape (``[T, ...]``: teacher top-k log-probs, router replay) in Arrow.

A column of ``T`` tokens shaped ``(T, k1, ..., kd)`` is stored as ``list<fixed_size_list<...<dtype, kd>..., k1>>``
(one outer list per pack, one fixed-size list per token): the trailing shape is in the schema, so a reader needs
nothing else. A flat column ``(T,)`` stays ``list<dtype>``. Input columns may also nest variable lists
(``list<list<double>>``: what JSON-like writers produce); :func:`nested_values` reads both and says where the
inner lengths differ.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def _flat_arrow(values: np.ndarray) -> pa.Array:
    """A flat numeric numpy array as an Arrow array over the same buffer (``pa.array`` would import pandas)."""
    if values.dtype.kind in "iuf" and values.dtype.byteorder in "=|":
        values = np.ascontiguousarray(values)
        return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), values.shape[0], [None, pa.py_buffer(values)])
    return pa.array(values)


def token_values(values: np.ndarray) -> pa.Array:
    """``(T, k1, ..., kd)`` numbers as an Arrow array of ``T`` items: flat for ``d = 0``, else nested
    fixed-size lists (``k1`` lists of ``k2`` ... of ``kd`` values).

    Example:
        >>> token_values(np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)).to_pylist()
        [[1.0, 2.0], [3.0, 4.0]]
    """
    out = _flat_arrow(np.ascontiguousarray(values).reshape(-1))
    for k in reversed(values.shape[1:]):
        out = pa.FixedSizeListArray.from_arrays(out, int(k))
    return out


def token_lists(offsets: np.ndarray, values: np.ndarray) -> pa.Array:
    """One list per row (``offsets``: ``(R+1,)``, rebased to 0) of the per-token items of ``values`` (``(T, ...)``).

    Example:
        >>> token_lists(np.array([0, 1, 2]), np.array([[1, 2], [3, 4]])).to_pylist()
        [[[1, 2]], [[3, 4]]]
    """
    items = token_values(values)
    if offsets[-1] < 2**31 - 1:
        return pa.ListArray.from_arrays(_flat_arrow(offsets.astype(np.int32)), items)
    return pa.LargeListArray.from_arrays(_flat_arrow(offsets.astype(np.int64)), items)


def trailing_shape(t: pa.DataType) -> tuple[int, ...] | None:
    """The per-token shape of an Arrow column type: ``()`` for ``list<number>``, ``(k, ...)`` for
    ``list<fixed_size_list<number, k>>``; ``None`` when the type nests variable lists or is not numeric.

    Example:
        >>> trailing_shape(pa.list_(pa.list_(pa.float32(), 2))), trailing_shape(pa.list_(pa.string()))
        ((2,), None)
    """
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
        return None
    t, shape = t.value_type, []
    while pa.types.is_fixed_size_list(t):
        shape.append(t.list_size)
        t = t.value_type
    numeric = pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
    return tuple(shape) if numeric else None


def is_nested_numeric(t: pa.DataType) -> bool:
    """Whether ``t`` is a list (per row) of lists (per token, fixed or variable size, any depth) of numbers.

    Example:
        >>> is_nested_numeric(pa.list_(pa.list_(pa.int64()))), is_nested_numeric(pa.list_(pa.int64()))
        (True, False)
    """
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
        return False
    t, depth = t.value_type, 0
    while pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        t, depth = t.value_type, depth + 1
    return depth > 0 and (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t))


def nested_values(items: pa.Array) -> tuple[np.ndarray | None, tuple[int, ...], np.ndarray]:
    """The per-token items of a column (``items``: one entry per token, lists of numbers at any depth) as
    ``(values (T, *shape) or None, shape, bad)``: ``shape`` is the first token's, ``bad`` the ``(T,)`` bool of
    tokens whose item is null, holds a null or has another shape (``values`` is None when any is bad: the
    caller refuses those rows by name).

    Example:
        >>> v, shape, bad = nested_values(pa.array([[1, 2], [3, 4], [5]]))
        >>> v, shape, bad.tolist()
        (None, (2,), [False, False, True])
        >>> nested_values(pa.array([[1, 2], [3, 4]]))[0].tolist()
        [[1, 2], [3, 4]]
    """
    import pyarrow.compute as pc  # 0.1 s of import: only pre-tokenized tables need it

    n = len(items)
    owner = np.arange(n)  # the token each element of the current level belongs to
    bad = items.is_null().to_numpy(zero_copy_only=False).copy() if items.null_count else np.zeros(n, dtype=bool)
    level, shape = items, []
    while isinstance(level.type, (pa.ListType, pa.LargeListType, pa.FixedSizeListType)):
        lengths = pc.fill_null(pc.list_value_length(level), 0).to_numpy(zero_copy_only=False).astype(np.int64)
        k = int(lengths[0]) if lengths.shape[0] else 0
        bad[owner[lengths != k]] = True
        if level.null_count:
            bad[owner[level.is_null().to_numpy(zero_copy_only=False)]] = True
        shape.append(k)
        owner = np.repeat(owner, lengths)
        level = pc.list_flatten(level)
    if level.null_count:
        bad[owner[level.is_null().to_numpy(zero_copy_only=False)]] = True
    if bad.any() or 0 in shape:
        return None, tuple(shape), bad | (0 in shape)
    return level.to_numpy(zero_copy_only=False).reshape(n, *shape), tuple(shape), bad


def cell_values(cell) -> np.ndarray:
    """One row's per-token column (a list scalar of :func:`token_lists`) as a numpy ``(T, *shape)`` array.

    Example:
        >>> cell_values(token_lists(np.array([0, 2]), np.array([[1, 2], [3, 4]]))[0]).tolist()
        [[1, 2], [3, 4]]
    """
    items = cell.values
    shape = []
    while isinstance(items.type, pa.FixedSizeListType):
        shape.append(items.type.list_size)
        items = items.flatten()
    return np.array(items.to_numpy(zero_copy_only=False)).reshape(len(cell.values), *shape)
