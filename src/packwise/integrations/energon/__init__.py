"""Megatron-Energon: ``PackwiseTaskEncoderMixin``, a task-encoder mixin whose packing hooks are packwise's
planner and assembler (overflow cuts in ``_overflow``)."""

from ._mixin import QWEN_MEDIA_BOUNDS, QWEN_MEDIA_TOKENS, SEQUENCE_FIELDS, PackedSample, PackwiseTaskEncoderMixin  # noqa: F401

__all__ = ["PackwiseTaskEncoderMixin"]
