"""PyTorch data loading for packed datasets (implemented in ``packwise.integrations.torch_data``)."""

from .integrations.torch_data import DistributedPackSampler, PackedParquetDataset

__all__ = ["DistributedPackSampler", "PackedParquetDataset"]
