"""Hugging Face integration (re-exported from ``packwise.integrations.hf``)."""

from .integrations.hf import (
    PackedDataCollator,
    PackingRefused,
    attention_name,
    packwise_attention_forward,
    position_offset,
    register_packed_attention,
    use_packed_attention,
)

__all__ = [
    "PackedDataCollator",
    "PackingRefused",
    "attention_name",
    "packwise_attention_forward",
    "position_offset",
    "register_packed_attention",
    "use_packed_attention",
]
