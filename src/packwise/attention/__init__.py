"""Varlen attention that isolates packed documents, on every backend (torch)."""

from ._varlen import BACKENDS, FEATURES, Backend, attend, available_backends, resolve_backend, varlen_attention

__all__ = ["BACKENDS", "FEATURES", "Backend", "attend", "available_backends", "resolve_backend", "varlen_attention"]
