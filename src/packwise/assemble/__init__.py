"""Assembly: execute a plan into torch tensors — THD packs, batches, context-parallel shards, Megatron
params. Planning decided; nothing here decides membership.

``__all__`` is the user API; the other names imported here (``noqa: F401``) are the layer API the
integrations, stream and config use."""

from ._batch import BATCH_KEYS, HF_KEYS, MEDIA_KEYS, NON_TOKEN_KEYS, PackedBatch  # noqa: F401
from ._collate import EMIT, Layout, collate_packs  # noqa: F401
from ._collator import PackCollator
from ._columns import RESERVED  # noqa: F401
from ._cp import as_int, cp_indices, shard_for_context_parallel, unshard_context_parallel  # noqa: F401
from ._flatten import flatten_padded_batch
from ._fused import assemble_batch
from ._labels import Labels, shift_labels, unshift_labels  # noqa: F401
from ._megatron import to_packed_seq_params
from ._pack import PackedSequence, assemble_pack
from ._static import check_max_segments, pad_segments  # noqa: F401

__all__ = [
    "PackCollator",
    "PackedBatch",
    "PackedSequence",
    "assemble_batch",
    "assemble_pack",
    "collate_packs",
    "flatten_padded_batch",
    "shard_for_context_parallel",
    "to_packed_seq_params",
]
