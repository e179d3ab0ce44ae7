"""The offline pipeline: read, tokenize, apply the overflow policy, plan, and build packed rows (numpy +
pyarrow; no torch)."""

from ._options import PackOptions
from ._overflow import OVERFLOW_POLICIES, Overflow, OverflowCounts, apply_overflow
from ._pack import pack_columns, pack_dataset, resolve_chat_template, write_packs
from ._report import PackReport
from ._samples import Samples
from ._table import PackedColumns

__all__ = [
    "OVERFLOW_POLICIES",
    "Overflow",
    "OverflowCounts",
    "PackOptions",
    "PackReport",
    "PackedColumns",
    "Samples",
    "apply_overflow",
    "pack_columns",
    "pack_dataset",
    "resolve_chat_template",
    "write_packs",
]
