"""Streaming packing with bounded memory and exact resume (torch)."""

from ._loader import PackingLoader
from ._stream import PackingStream, StreamSourceError

__all__ = ["PackingLoader", "PackingStream", "StreamSourceError"]
