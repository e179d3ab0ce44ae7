"""packwise: sequence packing for LLM and VLM supervised fine-tuning.

Notation used in every docstring: ``N`` sequences, ``P`` packs, ``T`` tokens, ``C`` capacity (tokens per pack).

The top-level names are imported on first use, so ``import packwise.plan`` stays numpy-only.
"""

from __future__ import annotations

import importlib

from . import _renamed  # noqa: F401  (old import paths of renamed modules warn)

__version__ = "0.1.0"

_EXPORTS = {
    "pack_dataset": "packwise.pipeline",
    "PackReport": "packwise.pipeline",
    "plan_packs": "packwise.plan",
    "PackPlan": "packwise.plan",
    "PackingConfig": "packwise.config",
    "Topology": "packwise.config",
}
__all__ = ["PackPlan", "PackReport", "PackingConfig", "__version__", "pack_dataset", "plan_packs"]


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'packwise' has no attribute {name!r}")
