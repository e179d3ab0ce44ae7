"""Cut a sample's per-token values (the stream's ``overflow="truncate"|"split"``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

_ARRAYS = (list, tuple, np.ndarray, torch.Tensor)


def _rows(v) -> bool:
    """A nested sequence (``(3, L)`` lists): its first element is itself a sequence."""
    return isinstance(v, (list, tuple)) and len(v) > 0 and isinstance(v[0], _ARRAYS)


def _last_axis(v, a: int, b: int):
    """``v[..., a:b]`` for tensors, arrays and nested lists (each row cut, the container type kept)."""
    if isinstance(v, (np.ndarray, torch.Tensor)):
        return v[..., a:b]
    if _rows(v):
        return type(v)(_last_axis(row, a, b) for row in v)
    return v[a:b]


def _token_count(v) -> int | None:
    """The length of the last axis of position ids (``(L,)``, ``(1, L)``, MRoPE ``(3, L)``), nested lists included."""
    while _rows(v):
        v = v[0]
    if isinstance(v, (np.ndarray, torch.Tensor)):
        return int(v.shape[-1]) if v.ndim else None
    return len(v) if isinstance(v, (list, tuple)) else None


def _slice(sample: Mapping, a: int, b: int, n: int) -> dict[str, Any]:
    """Tokens ``a:b`` of every per-token value: position ids on their last axis (``(L,)``, ``(1, L)`` or MRoPE
    ``(3, L)``; tensors, arrays or nested lists), every other per-token column (``(L, ...)``) on its first."""
    out = {}
    for k, v in sample.items():
        if k == "position_ids" and isinstance(v, _ARRAYS) and _token_count(v) == n:
            out[k] = _last_axis(v, a, b)
        elif isinstance(v, _ARRAYS) and not (hasattr(v, "ndim") and v.ndim == 0) and len(v) == n:
            out[k] = v[a:b]
        else:
            out[k] = v
    return out
