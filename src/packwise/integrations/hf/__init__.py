"""Hugging Face Transformers / TRL: the packed collator, the varlen attention patch and its guard.

Public names (re-exported by :mod:`packwise.hf`): ``PackedDataCollator``, ``PackingRefused``,
``use_packed_attention``, ``model_cost``; also ``attention_name``, ``register_packed_attention``, ``position_offset``.
"""

from ._api import (  # noqa: F401  (the other names stay importable)
    PackedDataCollator,
    PackingRefused,
    attention_name,
    packwise_attention_forward,
    position_offset,
    register_packed_attention,
    use_packed_attention,
)
from ._cost import model_cost  # noqa: F401

__all__ = ["PackedDataCollator", "PackingRefused", "use_packed_attention"]
