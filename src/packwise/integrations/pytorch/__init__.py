"""Plain PyTorch: a ``Dataset`` over packed Parquet and a ``Sampler`` that balances packs across ranks.

Public names (re-exported by :mod:`packwise.data`): ``PackedParquetDataset``, ``DistributedPackSampler``.
"""

from ._data import DistributedPackSampler, PackedParquetDataset

__all__ = ["DistributedPackSampler", "PackedParquetDataset"]
