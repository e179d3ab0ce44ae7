"""Integrations with training stacks, one folder per system; no system imports another.

- ``hf/`` — Hugging Face Transformers / TRL: ``PackedDataCollator``, ``use_packed_attention`` (public home
  :mod:`packwise.hf`).
- ``pytorch/`` — plain PyTorch data loading: ``PackedParquetDataset``, ``DistributedPackSampler`` (public home
  :mod:`packwise.data`).
- ``energon/`` — Megatron-Energon: ``PackwiseTaskEncoderMixin``.
- ``ray/`` — Ray Data / Ray tasks: ``pack_ray`` (the ``--engine ray`` of ``packwise pack``).
"""
