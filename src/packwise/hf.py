"""Hugging Face integration: the home of the HF names (implemented in ``packwise.integrations.hf``).

``__all__`` is the user API; the other names imported here (``noqa: F401``) stay importable for code that
used them."""

from .integrations.hf import (  # noqa: F401
    PackedDataCollator,
    PackingRefused,
    attention_name,
    model_cost,
    packwise_attention_forward,
    position_offset,
    register_packed_attention,
    use_packed_attention,
)

__all__ = ["PackedDataCollator", "PackingRefused", "use_packed_attention"]
