"""Assembly: execute a plan into torch tensors — THD packs, batches, context-parallel shards, Megatron
params. Planning decided; nothing here decides membership."""

from ._batch import BATCH_KEYS, NON_TOKEN_KEYS, PackedBatch
from ._collate import EMIT, Layout, collate_packs
from ._collator import PackCollator
from ._cp import cp_indices, shard_for_context_parallel, unshard_context_parallel
from ._flatten import flatten_padded_batch
from ._fused import assemble_batch
from ._labels import Labels, shift_labels, unshift_labels
from ._megatron import to_packed_seq_params
from ._pack import PackedSequence, assemble_pack

__all__ = [
    "BATCH_KEYS",
    "EMIT",
    "NON_TOKEN_KEYS",
    "Labels",
    "Layout",
    "PackCollator",
    "PackedBatch",
    "PackedSequence",
    "assemble_batch",
    "assemble_pack",
    "collate_packs",
    "cp_indices",
    "flatten_padded_batch",
    "shard_for_context_parallel",
    "shift_labels",
    "to_packed_seq_params",
    "unshard_context_parallel",
    "unshift_labels",
]
