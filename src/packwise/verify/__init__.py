"""Proof of isolation: packed vs alone logits, loss and gradients on real models (torch + transformers)."""

from ._check import EquivalenceReport, check_equivalence
from ._models import TINY, load_documents, load_model, tiny_config

__all__ = ["TINY", "EquivalenceReport", "check_equivalence", "load_documents", "load_model", "tiny_config"]
