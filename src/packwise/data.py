"""PyTorch data loading for packed datasets (implemented in ``packwise.integrations.pytorch``)."""

from .integrations.pytorch import DistributedPackSampler, PackedParquetDataset

__all__ = ["DistributedPackSampler", "PackedParquetDataset"]
