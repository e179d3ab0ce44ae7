"""The offline pipeline: read, tokenize, apply the overflow policy, plan, and build packed rows (numpy +
pyarrow; no torch).

``__all__`` is the user API. The other names imported here (marked ``noqa: F401``) are the layer API: what
the integrations, report, verify and the CLI import from the pipeline instead of reaching into ``pipeline._*``.
"""

from ._demo import chitchat_conversations, chitchat_input  # noqa: F401
from ._media import image_digest, resolve_media_path, with_media_root  # noqa: F401
from ._options import PackOptions  # noqa: F401
from ._overflow import OVERFLOW_POLICIES, Overflow, OverflowCounts, apply_overflow, cut_points  # noqa: F401
from ._pack import pack_columns, pack_dataset, resolve_chat_template, write_packs  # noqa: F401
from ._report import PackReport
from ._samples import Samples, tokenize_rows  # noqa: F401
from ._table import PackedColumns  # noqa: F401
from ._tokens import TRL_MASKS, real_span, tokens_from_rows  # noqa: F401

__all__ = ["PackReport", "pack_dataset"]
