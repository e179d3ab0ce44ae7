"""Proof of isolation: packed vs alone logits, loss and gradients on real models (torch + transformers).

``__all__`` is the user API; the other names imported here (``noqa: F401``) are the layer API ``packwise
verify`` (the CLI) uses."""

from ._check import EquivalenceReport, check_equivalence  # noqa: F401
from ._families import FAMILIES, family_model  # noqa: F401
from ._matrix import family_documents  # noqa: F401
from ._models import (  # noqa: F401
    TINY,
    load_documents,
    load_model,
    load_multimodal_documents,
    load_omni_documents,
    tiny_config,
)
from ._nemotron import load_nemotron_omni_documents  # noqa: F401

__all__ = ["check_equivalence", "load_model"]
