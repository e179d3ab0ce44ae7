"""Shared constants."""

#: Label that carries no loss (PyTorch ``cross_entropy``'s default ``ignore_index``; HF convention).
IGNORE_INDEX = -100
