"""Streaming packing with bounded memory and exact resume (torch)."""

from ._loader import PackingLoader
from ._stream import PackingStream, StreamSourceError  # noqa: F401

__all__ = ["PackingLoader", "PackingStream"]
