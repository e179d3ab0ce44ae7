"""Varlen attention that isolates packed documents, on every backend (torch).

``__all__`` is the user API; the other names imported here (``noqa: F401``) are the layer API the HF
integration and config use."""

from ._varlen import (  # noqa: F401
    BACKENDS,
    FEATURES,
    Backend,
    attend,
    available_backends,
    resolve_backend,
    varlen_attention,
)

__all__ = ["available_backends", "varlen_attention"]
