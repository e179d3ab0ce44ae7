"""Cut a sample's per-token values (the stream's ``overflow="truncate"|"split"``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch


def _slice(sample: Mapping, a: int, b: int, n: int) -> dict[str, Any]:
    """Tokens ``a:b`` of every per-token value (position ids are sliced on their last axis)."""
    out = {}
    for k, v in sample.items():
        if k == "position_ids" and hasattr(v, "shape") and len(v.shape) == 2:
            out[k] = v[..., a:b]
        elif isinstance(v, (list, tuple, np.ndarray, torch.Tensor)) and len(v) == n:
            out[k] = v[a:b]
        else:
            out[k] = v
    return out
