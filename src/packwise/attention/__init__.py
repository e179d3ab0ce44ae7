"""Varlen attention that isolates packed documents, on every backend (torch)."""

from ._varlen import BACKENDS, Backend, available_backends, varlen_attention

__all__ = ["BACKENDS", "Backend", "available_backends", "varlen_attention"]
