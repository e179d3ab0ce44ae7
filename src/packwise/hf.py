"""Hugging Face integration (re-exported from ``packwise.integrations.hf``)."""

from .integrations.hf import (
    PackedDataCollator,
    attention_name,
    packwise_attention_forward,
    register_packed_attention,
    use_packed_attention,
)

__all__ = [
    "PackedDataCollator",
    "attention_name",
    "packwise_attention_forward",
    "register_packed_attention",
    "use_packed_attention",
]
